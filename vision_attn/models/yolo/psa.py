"""Position-sensitive attention of YOLO11 (C2PSA): multi-head self-attention over a flattened feature
map, with a depth-wise 3x3 convolution of the values as positional encoding."""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.models.yolo.blocks import Conv

__all__ = ["Attention", "PSABlock", "C2PSA"]


class Attention(nn.Module):
    """Self-attention over the H*W positions of a (B, dim, H, W) map -> (B, dim, H, W).

    One 1x1 convolution gives per head key_dim queries and keys (key_dim = head_dim * attn_ratio) and
    head_dim values; the output is proj(attn(v) + pe(v)), pe a depth-wise 3x3 convolution.
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
        q, k, v = self.qkv(x).view(b, self.num_heads, 2 * self.key_dim + self.head_dim, h * w).split(
            [self.key_dim, self.key_dim, self.head_dim], dim=2)
        attn = ((q * self.scale).transpose(-2, -1) @ k).softmax(dim=-1)  # (B, heads, N, N)
        out = (v @ attn.transpose(-2, -1)).view(b, c, h, w) + self.pe(v.reshape(b, c, h, w))
        return self.proj(out)


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


class C2PSA(nn.Module):
    """CSP block whose second half runs n :class:`PSABlock` (heads = c / 64). c1 must equal c2.
    (B, c1, H, W) -> (B, c1, H, W)."""

    def __init__(self, c1: int, c2: int, n: int = 1, e: float = 0.5) -> None:
        super().__init__()
        if c1 != c2:
            from vision_attn.errors import ConfigError
            raise ConfigError(f"C2PSA keeps its channel count: input {c1} != output {c2}; give it the input's "
                              "channel count")
        self.c = int(c1 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.cv2 = Conv(2 * self.c, c1, 1)
        self.m = nn.Sequential(*(PSABlock(self.c, attn_ratio=0.5, num_heads=max(self.c // 64, 1)) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.cv1(x).split((self.c, self.c), dim=1)
        return self.cv2(torch.cat((a, self.m(b)), 1))
