"""YOLOv9-e's composite backbone links: CBLinear projects one map into several channel groups;
CBFuse resizes chosen groups of earlier CBLinear rows to a target map and adds them to it."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.models.yolo.conv import autopad

__all__ = ["CBLinear", "CBFuse"]


class CBLinear(nn.Module):
    """One convolution (with bias) to sum(c2s) channels, split into groups of c2s channels:
    (B, c1, H, W) -> a tuple of (B, c2s[i], H/s, W/s)."""

    def __init__(self, c1: int, c2s: Sequence[int], k: int = 1, s: int = 1, p: int | None = None, g: int = 1) -> None:
        super().__init__()
        self.c2s = list(c2s)
        self.conv = nn.Conv2d(c1, sum(self.c2s), k, s, autopad(k, p), groups=g, bias=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.conv(x).split(self.c2s, dim=1)


class CBFuse(nn.Module):
    """Inputs: n CBLinear outputs then a target map (B, C, H, W); group ``idx[i]`` of the i-th CBLinear
    output is resized (nearest) to H x W, and all are summed with the target -> (B, C, H, W)."""

    def __init__(self, idx: Sequence[int]) -> None:
        super().__init__()
        self.idx = list(idx)

    def forward(self, xs: list) -> torch.Tensor:
        target = xs[-1]
        out = target
        for i, groups in zip(self.idx, xs[:-1]):
            out = out + F.interpolate(groups[i], size=target.shape[2:], mode="nearest")
        return out
