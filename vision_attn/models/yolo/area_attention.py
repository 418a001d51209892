"""YOLO12's area attention: multi-head self-attention within ``area`` horizontal strips of a feature
map (AAttn), its residual block (ABlock), and the CSP block built of them (A2C2f).

Splitting the H*W positions (row-major) into ``area`` equal strips and attending within each cuts the
cost of the attention products by ``area`` while keeping a large receptive field; ``area`` 1 is plain
global attention. The attention runs on ``scaled_dot_product_attention``: the same
softmax(q kᵀ / sqrt(head_dim)) v as ultralytics' explicit products, fused, counted by
``vision-attn flops``. State-dict keys and outputs equal ultralytics' on its weights.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.yolo.blocks import C3k
from vision_attn.models.yolo.conv import Conv

__all__ = ["AAttn", "ABlock", "A2C2f", "AreaAttention", "HEAD_WIDTH"]

HEAD_WIDTH = 32
"""Channels per head in YOLO12's blocks (heads = channels / 32)."""


class AAttn(nn.Module):
    """Area attention over a (B, dim, H, W) map -> (B, dim, H, W).

    One 1x1 convolution gives per head ``head_dim`` queries, keys and values (channels laid out per
    head as [q, k, v]); attention runs within each of ``area`` strips of the row-major H*W positions
    (H*W must divide by ``area``); the output is proj(attn(v) + pe(v)), pe a depth-wise 7x7
    convolution of the values.
    """

    def __init__(self, dim: int, num_heads: int, area: int = 1) -> None:
        super().__init__()
        if num_heads < 1 or dim % num_heads:
            raise ConfigError(f"area attention: {dim} channels do not split into {num_heads} heads")
        self.area = max(int(area), 1)
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = Conv(dim, 3 * dim, 1, act=False)
        self.proj = Conv(dim, dim, 1, act=False)
        self.pe = Conv(dim, dim, 7, 1, 3, g=dim, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        n = h * w
        if n % self.area:
            raise ValueError(f"area attention: {h}x{w} = {n} positions do not split into {self.area} areas; "
                             f"use an input size whose map at this row has a multiple of {self.area} positions")
        tokens = self.qkv(x).flatten(2).transpose(1, 2)  # (B, N, 3C), positions row-major
        tokens = tokens.reshape(b * self.area, n // self.area, self.num_heads, 3 * self.head_dim).transpose(1, 2)
        q, k, v = tokens.split(self.head_dim, dim=-1)  # (B*area, heads, N/area, head_dim)
        out = F.scaled_dot_product_attention(q, k, v, scale=self.head_dim ** -0.5)

        def to_map(t: torch.Tensor) -> torch.Tensor:  # (B*area, heads, N/area, d) -> (B, C, H, W)
            return t.transpose(1, 2).reshape(b, h, w, c).permute(0, 3, 1, 2)

        return self.proj(to_map(out) + self.pe(to_map(v)))


class ABlock(nn.Module):
    """x + attn(x), then x + mlp(x) (1x1 convolutions dim -> dim * mlp_ratio -> dim), ``attn`` an
    :class:`AAttn`. (B, dim, H, W) -> same. Its convolution weights start truncated-normal (std 0.02),
    as in YOLO12."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 1.2, area: int = 1) -> None:
        super().__init__()
        self.attn = AAttn(dim, num_heads=num_heads, area=area)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(Conv(dim, hidden, 1), Conv(hidden, dim, 1, act=False))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.trunc_normal_(m.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x)
        return x + self.mlp(x)


class A2C2f(nn.Module):
    """YOLO12's CSP block: cv1 to c_ = c2 * e channels (a multiple of 32), n inner blocks one after
    the other (each two :class:`ABlock` with c_ / 32 heads when ``a2``, else a :class:`C3k`),
    concatenate cv1's output and every inner output ((1 + n) * c_ channels), fuse with cv2. With
    ``a2`` and ``residual`` (scales l and x) the result is x + gamma * cv2(...), gamma a learned
    per-channel scale starting at 0.01 (then c1 must equal c2). (B, c1, H, W) -> (B, c2, H, W)."""

    def __init__(self, c1: int, c2: int, n: int = 1, a2: bool = True, area: int = 1, residual: bool = False,
                 mlp_ratio: float = 2.0, e: float = 0.5, g: int = 1, shortcut: bool = True) -> None:
        super().__init__()
        c_ = int(c2 * e)
        if c_ % HEAD_WIDTH:
            raise ConfigError(f"A2C2f: hidden width {c_} (= {c2} x {e}) must be a multiple of {HEAD_WIDTH} "
                              f"(heads of {HEAD_WIDTH} channels); change the row's channels or the scale's width")
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv((1 + n) * c_, c2, 1)
        residual = bool(a2) and bool(residual)
        if residual and c1 != c2:
            raise ConfigError(f"A2C2f with a residual keeps its channel count: input {c1} != output {c2}")
        self.gamma = nn.Parameter(0.01 * torch.ones(c2)) if residual else None
        self.m = nn.ModuleList(
            nn.Sequential(*(ABlock(c_, c_ // HEAD_WIDTH, mlp_ratio, area) for _ in range(2))) if a2
            else C3k(c_, c_, 2, shortcut, g)
            for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        for m in self.m:
            y.append(m(y[-1]))
        out = self.cv2(torch.cat(y, 1))
        return x + self.gamma.view(1, -1, 1, 1) * out if self.gamma is not None else out


class AreaAttention(ABlock):
    """An :class:`ABlock` as an attention row (``[-1, 1, AreaAttention, []]``, e.g. by ``yaml insert``):
    built for its input's channels, heads of 32 channels (8 when 32 does not divide them), ``area``
    strips (1: global attention), ``mlp_ratio`` 1.2. ``zero_init`` starts it as the exact identity
    (the last batch norm of its attention and of its MLP at zero), so a pretrained detector is
    unchanged before training."""

    def __init__(self, channels: int, num_heads: int | None = None, area: int = 1, mlp_ratio: float = 1.2,
                 zero_init: bool = False) -> None:
        width = HEAD_WIDTH if channels % HEAD_WIDTH == 0 else 8
        heads = num_heads or max(channels // width, 1)
        if channels % heads:
            raise ConfigError(f"AreaAttention: {channels} channels do not split into {heads} heads; give num_heads "
                              "that divides the channel count")
        super().__init__(channels, heads, mlp_ratio, area)
        if zero_init:
            for bn in (self.attn.proj.bn, self.mlp[-1].bn):
                nn.init.zeros_(bn.weight)
                nn.init.zeros_(bn.bias)
