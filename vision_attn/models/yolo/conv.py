"""The convolution units every YOLO block is made of: convolution + batch norm + activation.

State-dict keys equal ultralytics' (``conv.weight``, ``bn.*``), so its weights load unchanged.
"""
from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["autopad", "Conv", "DWConv", "RepConv"]


def autopad(k: int, p: int | None = None, d: int = 1) -> int:
    """'same' padding for a k x k convolution with dilation d (stride 1)."""
    if p is not None:
        return p
    if d > 1:
        k = d * (k - 1) + 1
    return k // 2


class Conv(nn.Module):
    """Convolution (no bias), batch norm, SiLU: (B, c1, H, W) -> (B, c2, H/s, W/s).

    ``act``: True for SiLU, False for none, or a module; the builder swaps SiLU for the YAML's
    ``activation:`` after building.
    """

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, p: int | None = None, g: int = 1, d: int = 1,
                 act: bool | nn.Module = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p, d), groups=g, dilation=d, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU() if act is True else act if isinstance(act, nn.Module) else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class DWConv(Conv):
    """Depth-wise (grouped by gcd(c1, c2)) :class:`Conv`."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, d: int = 1, act: bool | nn.Module = True) -> None:
        super().__init__(c1, c2, k, s, g=math.gcd(c1, c2), d=d, act=act)


class RepConv(nn.Module):
    """Re-parameterisable 3x3 convolution (RepVGG, as in YOLOv9's ELAN blocks): SiLU of a 3x3
    :class:`Conv` plus a 1x1 :class:`Conv` (both without activation), which add up to one 3x3
    convolution after training. (B, c1, H, W) -> (B, c2, H/s, W/s). This activation stays SiLU
    whatever the YAML's ``activation:`` says, as in ultralytics."""

    def __init__(self, c1: int, c2: int, k: int = 3, s: int = 1, g: int = 1) -> None:
        super().__init__()
        if k != 3:
            raise ValueError(f"RepConv is a 3x3 convolution, got k={k}")
        self.conv1 = Conv(c1, c2, 3, s, p=1, g=g, act=False)
        self.conv2 = Conv(c1, c2, 1, s, p=0, g=g, act=False)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv1(x) + self.conv2(x))
