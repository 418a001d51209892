"""SAM 2's Hiera block (HieraDet, Ravi et al. 2024): windowed or global attention over a channels-last
map, with the queries max-pooled 2x2 at a stage's first block. Keys are timm's: ``norm1``, ``proj``
(the widening shortcut), ``attn.qkv``, ``attn.proj``, ``norm2``, ``mlp.fc1/fc2``, ``ls1/ls2.gamma``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.layers.drop_path import DropPath
from vision_attn.layers.layer_scale import LayerScale
from vision_attn.layers.mlp import Mlp
from vision_attn.layers.window_attention import window_partition, window_reverse

__all__ = ["PooledAttention", "MultiScaleBlock"]


def _max_pool(x: torch.Tensor, stride: tuple[int, int]) -> torch.Tensor:
    """(N, h, w, C) -> (N, h // sh, w // sw, C), the max over each stride x stride cell."""
    return F.max_pool2d(x.permute(0, 3, 1, 2), stride, stride).permute(0, 2, 3, 1)


class PooledAttention(nn.Module):
    """Multi-head attention within each (N, h, w, dim) window -> (N, h', w', dim_out); with ``q_stride``
    the queries are max-pooled by it first (h' = h // sh), the keys and values are not."""

    def __init__(self, dim: int, dim_out: int, heads: int, q_stride: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.dim_out, self.heads, self.q_stride = dim_out, heads, q_stride
        self.qkv = nn.Linear(dim, 3 * dim_out)
        self.proj = nn.Linear(dim_out, dim_out)

    sdpa = staticmethod(F.scaled_dot_product_attention)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N, h, w, _ = x.shape
        q, k, v = self.qkv(x).view(N, h * w, 3, self.heads, -1).unbind(2)  # (N, L, heads, head_dim) each
        if self.q_stride is not None:
            q = _max_pool(q.reshape(N, h, w, -1), self.q_stride)
            h, w = q.shape[1:3]
            q = q.reshape(N, h * w, self.heads, -1)
        out = self.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # (N, heads, L', head_dim)
        return self.proj(out.transpose(1, 2).reshape(N, h, w, self.dim_out))


class MultiScaleBlock(nn.Module):
    """Pre-norm block over (B, H, W, dim) -> (B, H', W', dim_out). ``window`` > 0: attention within
    ``window`` x ``window`` squares (the map padded at the bottom and right to whole windows, the
    padding cut off after); 0: global. A block that widens takes ``proj(norm1(x))`` as its shortcut,
    max-pooled by ``q_stride`` when it pools."""

    def __init__(self, dim: int, dim_out: int, heads: int, mlp_ratio: float = 4.0, q_stride: tuple[int, int] | None = None,
                 window: int = 0, init_values: float | None = None, drop_path: float = 0.0, norm_eps: float = 1e-6) -> None:
        super().__init__()
        self.dim, self.dim_out, self.window, self.q_stride = dim, dim_out, window, q_stride
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.proj = nn.Linear(dim, dim_out) if dim != dim_out else None
        self.attn = PooledAttention(dim, dim_out, heads, q_stride)
        self.ls1 = LayerScale(dim_out, init_values) if init_values is not None else nn.Identity()
        self.drop_path1 = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim_out, eps=norm_eps)
        self.mlp = Mlp(dim_out, int(dim_out * mlp_ratio))
        self.ls2 = LayerScale(dim_out, init_values) if init_values is not None else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.norm1(x)
        if self.proj is not None:
            shortcut = self.proj(x)
            if self.q_stride is not None:
                shortcut = _max_pool(shortcut, self.q_stride)
        if self.window:
            B, H, W, C = x.shape
            win = self.window
            # (H + win - 1) // win, not -(-H // win): traced into ONNX, integer division truncates towards 0
            Hp, Wp = (H + win - 1) // win * win, (W + win - 1) // win * win
            x = F.pad(x, (0, 0, 0, Wp - W, 0, Hp - H))
            x = window_partition(x, (win, win)).view(-1, win, win, C)
            x = self.attn(x)  # (B * windows, win', win', dim_out)
            wh, ww = x.shape[1:3]
            x = window_reverse(x.flatten(1, 2), (wh, ww), Hp // win * wh, Wp // win * ww)
            x = x[:, : shortcut.shape[1], : shortcut.shape[2]]
        else:
            x = self.attn(x)
        x = shortcut + self.drop_path1(self.ls1(x))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
