"""EVA-02's multi-head self-attention (timm's ``EvaAttention``): the key projection has no bias, the
queries and values have one; the rotary embedding (:mod:`vision_attn.layers.eva_rope`) rotates
channels in interleaved pairs.

Two layouts of the same computation, as timm's EVA-02 models have them: fused (``qkv_fused=True``:
``qkv.weight`` without bias, ``q_bias`` and ``v_bias`` apart; the key's zero bias is implied and not
stored) or separate (``q_proj``, ``k_proj`` without bias, ``v_proj``). ``sub_norm=True`` adds a norm
over the heads' output before ``proj`` (EVA-02's sub-LN in attention, timm's ``scale_attn_inner``:
key ``norm``). ``rotate_half=True`` rotates the rotary embedding's channels in halves (channel i with
i + d/2, :func:`~vision_attn.layers.pos_embed.apply_rope`: DINOv3's layout, timm's ``rope_rotate_half``)
instead of interleaved pairs.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.layers.attention import Attention, attend
from vision_attn.layers.eva_rope import apply_rope_interleaved
from vision_attn.layers.pos_embed import apply_rope


class EvaAttention(Attention):
    """Tokens (B, N, D) -> (B, N, D): :class:`~vision_attn.layers.attention.Attention` (its arguments,
    ``sdpa`` seam, ``q_norm``/``k_norm`` and attention-weight recording) with EVA-02's projections
    (``qkv_fused``), ``sub_norm`` and ``rope`` the (cos, sin) tables of :class:`RopeEva` (or, with
    ``rotate_half``, of :class:`~vision_attn.layers.rope_dinov3.RopeDinov3`)."""

    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = True, *, qkv_fused: bool = True,
                 sub_norm: bool = False, rotate_half: bool = False, **kwargs: Any) -> None:
        super().__init__(dim, num_heads, qkv_bias=False, **kwargs)  # qkv without bias: EVA's keys have none
        self.qkv_fused = qkv_fused
        self.rotate_half = rotate_half
        if qkv_fused:
            self.q_bias = nn.Parameter(torch.zeros(dim)) if qkv_bias else None
            self.v_bias = nn.Parameter(torch.zeros(dim)) if qkv_bias else None
        else:
            del self.qkv
            self.q_proj = nn.Linear(dim, dim, bias=qkv_bias)
            self.k_proj = nn.Linear(dim, dim, bias=False)
            self.v_proj = nn.Linear(dim, dim, bias=qkv_bias)
        self.norm = kwargs.get("norm_layer", nn.LayerNorm)(dim) if sub_norm else nn.Identity()

    def _qkv(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, D) -> (B, N, 3D): queries, keys, values."""
        if not self.qkv_fused:
            return torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)
        if self.q_bias is None:
            return self.qkv(x)
        return F.linear(x, self.qkv.weight, torch.cat([self.q_bias, torch.zeros_like(self.q_bias), self.v_bias]))

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self._qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (3, B, heads, N, d)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            rotate = apply_rope if self.rotate_half else apply_rope_interleaved
            q, k = rotate(q, *rope), rotate(k, *rope)
        x, self.weights = attend(q, k, v, dropout_p=self.attn_drop if self.training else 0.0,
                                 keep_weights=self.keep_weights, sdpa=self.sdpa)
        x = x.transpose(1, 2).reshape(B, N, C)  # (B, N, D)
        return self.proj_drop(self.proj(self.norm(x)))
