"""Attention pooling with a learned latent query (SigLIP's "MAP" head, big_vision's
``MAPHead``): tokens (B, N, D) -> one pooled vector (B, D).

Keys are timm's ``AttentionPoolLatent`` (``latent``, ``q``, ``kv``, ``proj``, ``norm``, ``mlp.fc1/fc2``),
so timm's SigLIP files load as they are.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers.attention import padding_bias
from vision_attn.layers.block import LayerNorm6
from vision_attn.layers.mlp import Mlp

__all__ = ["AttentionPoolLatent"]


class AttentionPoolLatent(nn.Module):
    """A learned query ``latent`` (1, 1, D) attends once over the tokens (multi-head; a padding ``mask`` optional), the
    result is projected (``proj``), then a residual MLP on its norm: ``y + mlp(norm(y))``.

    (B, N, D) -> (B, D). Only the query is learned, so the pooled vector is a softmax-weighted mix of
    the tokens' values, per head. ``sdpa``: as :class:`~vision_attn.layers.attention.Attention`'s.
    """

    sdpa = staticmethod(F.scaled_dot_product_attention)

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        act_layer: type[nn.Module] = nn.GELU,
        norm_layer: type[nn.Module] = LayerNorm6,
    ) -> None:
        super().__init__()
        if dim % num_heads:
            raise ConfigError(f"attention pool: embed_dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.latent = nn.Parameter(torch.zeros(1, 1, dim))
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, 2 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.norm = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer)
        nn.init.trunc_normal_(self.latent, std=dim ** -0.5)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``mask`` (B, N), boolean: the tokens to pool (False: padding of a NaFlex sequence, ignored)."""
        B, N, D = x.shape
        # the query is the same for every image: projected once, then expanded (the view of a parameter
        # made under no_grad would have no gradient function for torch's module tracker, FLOP counts)
        q = self.q(self.latent).expand(B, -1, -1)  # (B, 1, D)
        q = q.reshape(B, 1, self.num_heads, self.head_dim).transpose(1, 2)  # (B, heads, 1, d)
        kv = self.kv(x).reshape(B, N, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (2, B, heads, N, d)
        k, v = kv.unbind(0)
        bias = None if mask is None else padding_bias(mask, x.dtype)  # (B, 1, 1, N)
        y = self.sdpa(q, k, v, attn_mask=bias).transpose(1, 2).reshape(B, 1, D)  # (B, 1, D)
        y = self.proj(y)
        y = y + self.mlp(self.norm(y))
        return y[:, 0]  # (B, D)
