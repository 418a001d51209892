"""Multi-head self-attention on ``scaled_dot_product_attention``.

The fused kernel never forms the (N, N) attention matrix. When a tool needs the weights
(attention maps, rollout), :func:`record_attention` switches the modules of a model to computing
them for the duration of a ``with`` block and collects each layer's softmax weights.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers.pos_embed import apply_rope


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    keep_weights: bool = False,
    sdpa: Callable[..., torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax(q k^T / sqrt(d) + mask) v over (B, heads, N, d) inputs, by ``sdpa`` (default
    ``F.scaled_dot_product_attention``).

    ``mask`` is additive and broadcasts to (B, heads, N, N). Returns the output (B, heads, N, d) and,
    only when ``keep_weights``, the softmax weights (B, heads, N, N) computed explicitly.
    """
    if not keep_weights:
        return (sdpa or F.scaled_dot_product_attention)(q, k, v, attn_mask=mask, dropout_p=dropout_p), None
    attn = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)  # (B, heads, N, N)
    if mask is not None:
        attn = attn + mask
    attn = attn.softmax(dim=-1)
    out = F.dropout(attn, dropout_p) @ v if dropout_p else attn @ v
    return out, attn.detach()


def padding_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A key-padding mask (B, N), True where a token is real -> the additive attention mask (B, 1, 1, N):
    0 at real keys, the dtype's lowest value at padding (every query then ignores the padding)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        ~mask.bool(), torch.finfo(dtype).min)[:, None, None, :]


class Attention(nn.Module):
    """Multi-head self-attention over tokens (B, N, D) -> (B, N, D).

    One fused ``qkv`` projection and an output ``proj`` (timm's keys). ``rope``, when given, is a
    (cos, sin) pair of tables that rotates queries and keys of the patch tokens (2D RoPE).
    ``sdpa`` is the attention function (``F.scaled_dot_product_attention``'s signature); a CPU fast
    path replaces it from outside (:func:`vision_attn.kernels.accelerate`).
    """

    sdpa = staticmethod(F.scaled_dot_product_attention)
    keep_weights: bool
    weights: torch.Tensor | None

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        qkv_bias: bool = True,
        qk_norm: bool = False,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        norm_layer: type[nn.Module] = nn.LayerNorm,
    ) -> None:
        super().__init__()
        if dim % num_heads:
            raise ConfigError(f"embed_dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.keep_weights = False
        self.weights = None

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None,
                attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Tokens (B, N, D) -> (B, N, D); ``attn_mask``: additive, broadcast to (B, heads, N, N) (NaFlex's
        padded sequences: -inf at the padding keys)."""
        q, k, v = self.heads(x)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        x, self.weights = attend(q, k, v, attn_mask, dropout_p=self.attn_drop if self.training else 0.0,
                                 keep_weights=self.keep_weights, sdpa=self.sdpa)
        return self.project(x)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Tokens (B, N, D) -> q, k, v (B, heads, N, d), q and k normalised where ``qk_norm``."""
        B, N, _ = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (3, B, heads, N, d)
        q, k, v = qkv.unbind(0)
        return self.q_norm(q), self.k_norm(k), v

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """The heads' outputs (B, heads, N, d) -> tokens (B, N, D) through ``proj``."""
        return self.proj_drop(self.proj(x.transpose(1, 2).flatten(2)))  # (B, N, D)


@contextmanager
def record_attention(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Collect the attention weights of every attention module of ``model`` during the block.

    Yields a list that each forward pass extends with one (B, heads, N, N) tensor per attention
    module, in execution order. Outside the block the fused kernel is used again.
    """
    modules = [m for m in model.modules() if hasattr(m, "keep_weights")]
    maps: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda mod, _inp, _out: maps.append(mod.weights)) for m in modules]
    for m in modules:
        m.keep_weights = True
    try:
        yield maps
    finally:
        for m in modules:
            m.keep_weights, m.weights = False, None
        for h in hooks:
            h.remove()
