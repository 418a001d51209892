"""Ghost convolutions (GhostNet) as in the YOLOv8 ghost variants: half the output channels from a
convolution, the other half as a cheap depth-wise 5x5 convolution of those ("ghost" features)."""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.models.yolo.blocks import C3
from vision_attn.models.yolo.conv import Conv, DWConv

__all__ = ["GhostConv", "GhostBottleneck", "C3Ghost"]


class GhostConv(nn.Module):
    """cv1: a k x k :class:`Conv` (stride s) to c2/2 channels; cv2: a depth-wise 5x5 :class:`Conv` of
    that; the output concatenates both. (B, c1, H, W) -> (B, c2, H/s, W/s)."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, g: int = 1, act: bool | nn.Module = True) -> None:
        super().__init__()
        c_ = c2 // 2
        self.cv1 = Conv(c1, c_, k, s, None, g, act=act)
        self.cv2 = Conv(c_, c_, 5, 1, None, c_, act=act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv1(x)
        return torch.cat((y, self.cv2(y)), 1)


class GhostBottleneck(nn.Module):
    """Two :class:`GhostConv` (1x1, the second without activation) through c2/2 channels, with a
    depth-wise k x k convolution between them when s == 2; plus the input (or, at stride 2, a
    depth-wise + 1x1 projection of it). (B, c1, H, W) -> (B, c2, H/s, W/s)."""

    def __init__(self, c1: int, c2: int, k: int = 3, s: int = 1) -> None:
        super().__init__()
        c_ = c2 // 2
        self.conv = nn.Sequential(GhostConv(c1, c_, 1, 1),
                                  DWConv(c_, c_, k, s, act=False) if s == 2 else nn.Identity(),
                                  GhostConv(c_, c2, 1, 1, act=False))
        self.shortcut = (nn.Sequential(DWConv(c1, c1, k, s, act=False), Conv(c1, c2, 1, 1, act=False)) if s == 2
                         else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) + self.shortcut(x)


class C3Ghost(C3):
    """:class:`C3` whose n inner blocks are :class:`GhostBottleneck`."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = True, g: int = 1, e: float = 0.5) -> None:
        super().__init__(c1, c2, n, shortcut, g, e, block=lambda c: GhostBottleneck(c, c))
