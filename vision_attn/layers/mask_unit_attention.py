"""Hiera's attention (Ryali et al. 2023): mask-unit attention with query pooling.

Hiera keeps its tokens *unrolled* (:func:`unroll_order`): the pixel grid is split by the query stride
``s`` (2x2) repeatedly, and the offsets inside each split become the outermost token index. So the
``s`` offsets of the next pooling are always the leading ``prod(s)`` blocks of the sequence (pooling
is a max over them), and the tokens of one mask unit (a square of the grid) are those with the same
index modulo the number of units. Its block is :class:`~vision_attn.layers.pooling_block.PoolingBlock`
with :func:`unrolled_pool` as the shortcut's pooling. Keys are timm's: ``attn.qkv``, ``attn.proj``.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MaskUnitAttention", "unroll_order", "unrolled_pool"]


def unroll_order(size: Sequence[int], strides: Sequence[Sequence[int]]) -> torch.Tensor:
    """Indices ``order`` (N = prod(size)) such that ``tokens[:, order]`` of tokens in raster order over
    ``size`` is Hiera's unrolled order after splitting by each of ``strides`` in turn: position
    ``y = y_n * S + ... + sy_2 * s + sy_1`` goes to index (sy_1, sx_1, sy_2, sx_2, ..., y_n, x_n), the
    first split's offsets outermost. Its inverse (``argsort``) rolls the tokens back."""
    grid = torch.arange(math.prod(size), device="cpu").view(*size)
    dims = len(size)
    cur = list(size)
    x = grid[None]  # (offsets split off so far, *cur)
    for s in strides:
        cur = [c // k for c, k in zip(cur, s)]
        shape = [x.shape[0]] + [v for c, k in zip(cur, s) for v in (c, k)]
        x = x.reshape(shape)
        perm = [0] + [2 + 2 * d for d in range(dims)] + [1 + 2 * d for d in range(dims)]
        x = x.permute(perm).reshape(-1, *cur)  # the new offsets go after the earlier ones
    return x.reshape(-1)


class MaskUnitAttention(nn.Module):
    """(B, N, dim) unrolled tokens -> (B, N / q_stride, dim_out). With ``mask_unit``, attention is
    local within each of the ``N / (q_stride * window)`` mask units (``window``: tokens per unit after
    pooling); else global. ``q_stride`` > 1 max-pools the queries over the leading offsets."""

    def __init__(self, dim: int, dim_out: int, heads: int, q_stride: int = 1, window: int = 0,
                 mask_unit: bool = False) -> None:
        super().__init__()
        self.dim_out, self.heads, self.q_stride = dim_out, heads, q_stride
        self.head_dim = dim_out // heads
        self.window, self.mask_unit = window, mask_unit
        self.qkv = nn.Linear(dim, 3 * dim_out)
        self.proj = nn.Linear(dim_out, dim_out)

    sdpa = staticmethod(F.scaled_dot_product_attention)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, _ = x.shape
        units = N // (self.q_stride * self.window) if self.mask_unit else 1
        # token t = a * units + u: unit u fastest -> (3, B, heads, units, tokens per unit, head_dim)
        q, k, v = self.qkv(x).view(B, -1, units, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5).unbind(0)
        if self.q_stride > 1:
            q = q.reshape(B, self.heads, units, self.q_stride, -1, self.head_dim).amax(dim=3)
        if not self.mask_unit:  # global: 4-D tensors (the fused kernels' layout)
            out = self.sdpa(q[:, :, 0].contiguous(), k[:, :, 0].contiguous(), v[:, :, 0].contiguous())[:, :, None]
        else:
            out = self.sdpa(q, k, v)
        return self.proj(out.permute(0, 3, 2, 1, 4).reshape(B, -1, self.dim_out))


def unrolled_pool(x: torch.Tensor, stride: int, mean: bool = False) -> torch.Tensor:
    """(B, N, C) unrolled tokens -> (B, N / stride, C): the max over the leading ``stride`` offsets, as the
    attention pools its queries; ``mean``: the max and the mean side by side (B, N / stride, 2 * C), the
    shortcut of a block that widens without a projection."""
    split = x.view(x.shape[0], stride, -1, x.shape[-1])
    return torch.cat([split.amax(dim=1), split.mean(dim=1)], dim=-1) if mean else split.amax(dim=1)
