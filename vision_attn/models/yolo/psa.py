"""Position-sensitive attention (YOLOv10's PSA, YOLO11's C2PSA): multi-head self-attention over a
flattened feature map, with a depth-wise 3x3 convolution of the values as positional encoding.

The attention runs on ``scaled_dot_product_attention`` (the same softmax(q kᵀ / sqrt(key_dim)) v as
ultralytics' explicit matrix products, fused, and counted by ``vision-attn flops``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.yolo.conv import Conv

__all__ = ["Attention", "PSABlock", "C2PSA", "PSA"]


class Attention(nn.Module):
    """Self-attention over the H*W positions of a (B, dim, H, W) map -> (B, dim, H, W).

    One 1x1 convolution gives per head key_dim queries and keys (key_dim = head_dim * attn_ratio) and
    head_dim values (channels laid out per head as [q, k, v]); the output is
    proj(attn(v) + pe(v)), pe a depth-wise 3x3 convolution of the values.
    """

    def __init__(self, dim: int, num_heads: int = 8, attn_ratio: float = 0.5) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.key_dim = int(self.head_dim * attn_ratio)
        self.scale = self.key_dim ** -0.5
        self.qkv = Conv(dim, dim + 2 * self.key_dim * num_heads, 1, act=False)
        self.proj = Conv(dim, dim, 1, act=False)
        self.pe = Conv(dim, dim, 3, 1, g=dim, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        tokens = self.qkv(x).view(b, self.num_heads, 2 * self.key_dim + self.head_dim, h * w).transpose(-2, -1)
        q, k, v = tokens.split([self.key_dim, self.key_dim, self.head_dim], dim=-1)  # (B, heads, N, d)
        out = F.scaled_dot_product_attention(q, k, v, scale=self.scale)  # (B, heads, N, head_dim)
        v_map = v.transpose(-2, -1).reshape(b, c, h, w)
        return self.proj(out.transpose(-2, -1).reshape(b, c, h, w) + self.pe(v_map))


class PSABlock(nn.Module):
    """x + attn(x), then x + ffn(x) (1x1 convolutions c -> 2c -> c). (B, c, H, W) -> same."""

    def __init__(self, c: int, attn_ratio: float = 0.5, num_heads: int = 4, shortcut: bool = True) -> None:
        super().__init__()
        self.attn = Attention(c, attn_ratio=attn_ratio, num_heads=num_heads)
        self.ffn = nn.Sequential(Conv(c, c * 2, 1), Conv(c * 2, c, 1, act=False))
        self.add = bool(shortcut)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x) if self.add else self.attn(x)
        return x + self.ffn(x) if self.add else self.ffn(x)


def _same_channels(name: str, c1: int, c2: int) -> None:
    if c1 != c2:
        raise ConfigError(f"{name} keeps its channel count: input {c1} != output {c2}; give it the input's "
                          "channel count")


class C2PSA(nn.Module):
    """CSP block whose second half runs n :class:`PSABlock` (heads = c / 64). c1 must equal c2.
    (B, c1, H, W) -> (B, c1, H, W)."""

    def __init__(self, c1: int, c2: int, n: int = 1, e: float = 0.5) -> None:
        super().__init__()
        _same_channels("C2PSA", c1, c2)
        self.c = int(c1 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.cv2 = Conv(2 * self.c, c1, 1)
        self.m = nn.Sequential(*(PSABlock(self.c, attn_ratio=0.5, num_heads=max(self.c // 64, 1)) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.cv1(x).split((self.c, self.c), dim=1)
        return self.cv2(torch.cat((a, self.m(b)), 1))


class PSA(PSABlock):
    """YOLOv10's position-sensitive attention: cv1 to 2c channels (c = c1 * e), one
    :class:`PSABlock` (its ``attn`` and ``ffn`` held here directly, heads = c / 64) on the second
    half, concatenated with the first and fused by cv2. c1 must equal c2. (B, c1, H, W) -> same."""

    def __init__(self, c1: int, c2: int, e: float = 0.5) -> None:
        _same_channels("PSA", c1, c2)
        c = int(c1 * e)
        super().__init__(c, attn_ratio=0.5, num_heads=max(c // 64, 1))
        self.c = c
        self.cv1 = Conv(c1, 2 * c, 1, 1)
        self.cv2 = Conv(2 * c, c1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.cv1(x).split((self.c, self.c), dim=1)
        return self.cv2(torch.cat((a, super().forward(b)), 1))
