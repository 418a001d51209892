"""SAM 2's Hiera attention (HieraDet, Ravi et al. 2024): windowed or global attention over a channels-last
map, with the queries max-pooled 2x2 at a stage's first block (its block:
:class:`~vision_attn.layers.pooling_block.PoolingBlock` with :func:`max_pool` as the shortcut's pooling).
Keys are timm's: ``attn.qkv``, ``attn.proj``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.layers.window_attention import window_partition, window_reverse

__all__ = ["PooledAttention", "max_pool"]


def max_pool(x: torch.Tensor, stride: tuple[int, int]) -> torch.Tensor:
    """(N, h, w, C) -> (N, h // sh, w // sw, C), the max over each stride x stride cell."""
    return F.max_pool2d(x.permute(0, 3, 1, 2), stride, stride).permute(0, 2, 3, 1)


class PooledAttention(nn.Module):
    """Multi-head attention over a (B, H, W, dim) map -> (B, H', W', dim_out); with ``q_stride`` the queries
    are max-pooled by it first (H' = H // sh), the keys and values are not. ``window`` > 0: attention within
    ``window`` x ``window`` squares (the map padded at the bottom and right to whole windows, the padding cut
    off after); 0: global."""

    def __init__(self, dim: int, dim_out: int, heads: int, q_stride: tuple[int, int] | None = None,
                 window: int = 0) -> None:
        super().__init__()
        self.dim_out, self.heads, self.q_stride, self.window = dim_out, heads, q_stride, window
        self.qkv = nn.Linear(dim, 3 * dim_out)
        self.proj = nn.Linear(dim_out, dim_out)

    sdpa = staticmethod(F.scaled_dot_product_attention)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.window:
            return self.attend(x)
        B, H, W, C = x.shape
        win = self.window
        # (H + win - 1) // win, not -(-H // win): traced into ONNX, integer division truncates towards 0
        Hp, Wp = (H + win - 1) // win * win, (W + win - 1) // win * win
        x = F.pad(x, (0, 0, 0, Wp - W, 0, Hp - H))
        x = self.attend(window_partition(x, (win, win)).view(-1, win, win, C))  # (B * windows, win', win', dim_out)
        wh, ww = x.shape[1:3]
        x = window_reverse(x.flatten(1, 2), (wh, ww), Hp // win * wh, Wp // win * ww)
        if self.q_stride is not None:
            H, W = H // self.q_stride[0], W // self.q_stride[1]
        return x[:, :H, :W]

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        """(N, h, w, dim) windows (or the whole map) -> (N, h', w', dim_out), each attending within itself."""
        N, h, w, _ = x.shape
        q, k, v = self.qkv(x).view(N, h * w, 3, self.heads, -1).unbind(2)  # (N, L, heads, head_dim) each
        if self.q_stride is not None:
            q = max_pool(q.reshape(N, h, w, -1), self.q_stride)
            h, w = q.shape[1:3]
            q = q.reshape(N, h * w, self.heads, -1)
        out = self.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # (N, heads, L', head_dim)
        return self.proj(out.transpose(1, 2).reshape(N, h, w, self.dim_out))
