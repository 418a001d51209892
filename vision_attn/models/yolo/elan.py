"""YOLOv9's generalized efficient layer aggregation (GELAN) blocks and its downsampling layers.

An ELAN block splits a 1x1 convolution's output in two halves and runs two stages one after the
other on the second; the halves and both stage outputs are concatenated and fused by a 1x1
convolution. RepNCSPELAN4's stages are a RepCSP block (a :class:`~vision_attn.models.yolo.blocks.C3`
of re-parameterisable bottlenecks) and a 3x3 convolution; ELAN1's are single 3x3 convolutions.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.models.yolo.blocks import C3, Bottleneck
from vision_attn.models.yolo.conv import Conv, RepConv

__all__ = ["RepBottleneck", "RepCSP", "ELAN", "RepNCSPELAN4", "ELAN1", "SPPELAN", "ADown", "AConv"]

StageFactory = Callable[[int, int], nn.Module]
"""Builds one ELAN stage from its input and output channels."""


class RepBottleneck(Bottleneck):
    """:class:`Bottleneck` whose first convolution is a :class:`RepConv`."""

    def __init__(self, c1: int, c2: int, shortcut: bool = True, g: int = 1, e: float = 0.5) -> None:
        super().__init__(c1, c2, shortcut, g, (3, 3), e)
        self.cv1 = RepConv(c1, int(c2 * e), 3, 1)


class RepCSP(C3):
    """:class:`C3` whose n inner blocks are :class:`RepBottleneck`."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = True, g: int = 1, e: float = 0.5) -> None:
        super().__init__(c1, c2, n, shortcut, g, e, block=lambda c: RepBottleneck(c, c, shortcut, g, e=1.0))


class ELAN(nn.Module):
    """cv1 (1x1) to c3 channels split in two halves; cv2 = stage(c3 / 2 -> c4) on the second half,
    cv3 = stage(c4 -> c4) on that; cv4 (1x1) fuses [halves, cv2, cv3] (c3 + 2 c4 channels) to c2.
    (B, c1, H, W) -> (B, c2, H, W)."""

    def __init__(self, c1: int, c2: int, c3: int, c4: int, stage: StageFactory) -> None:
        super().__init__()
        self.c = c3 // 2
        self.cv1 = Conv(c1, c3, 1, 1)
        self.cv2 = stage(c3 // 2, c4)
        self.cv3 = stage(c4, c4)
        self.cv4 = Conv(c3 + 2 * c4, c2, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        y.append(self.cv2(y[-1]))
        y.append(self.cv3(y[-1]))
        return self.cv4(torch.cat(y, 1))


class RepNCSPELAN4(ELAN):
    """:class:`ELAN` whose stages are a :class:`RepCSP` of n bottlenecks followed by a 3x3 :class:`Conv`."""

    def __init__(self, c1: int, c2: int, c3: int, c4: int, n: int = 1) -> None:
        super().__init__(c1, c2, c3, c4, lambda a, b: nn.Sequential(RepCSP(a, b, n), Conv(b, b, 3, 1)))


class ELAN1(ELAN):
    """:class:`ELAN` whose stages are single 3x3 :class:`Conv` (YOLOv9-t/s)."""

    def __init__(self, c1: int, c2: int, c3: int, c4: int) -> None:
        super().__init__(c1, c2, c3, c4, lambda a, b: Conv(a, b, 3, 1))


class SPPELAN(nn.Module):
    """Spatial pyramid pooling in ELAN form: cv1 (1x1) to c3 channels, three chained k x k max-pools
    (cv2, cv3, cv4), cv5 (1x1) fuses the four maps to c2. (B, c1, H, W) -> (B, c2, H, W)."""

    def __init__(self, c1: int, c2: int, c3: int, k: int = 5) -> None:
        super().__init__()
        self.c = c3
        self.cv1 = Conv(c1, c3, 1, 1)
        self.cv2, self.cv3, self.cv4 = (nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2) for _ in range(3))
        self.cv5 = Conv(4 * c3, c2, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        for pool in (self.cv2, self.cv3, self.cv4):
            y.append(pool(y[-1]))
        return self.cv5(torch.cat(y, 1))


def _smooth(x: torch.Tensor) -> torch.Tensor:
    """2x2 average pooling at stride 1 (YOLOv9's downsamplers smooth before they subsample)."""
    return F.avg_pool2d(x, 2, 1, 0, False, True)


class ADown(nn.Module):
    """YOLOv9's downsampling: smooth, split the channels in two halves; a 3x3 stride-2 :class:`Conv`
    on the first, a 3x3 stride-2 max-pool then a 1x1 :class:`Conv` on the second; concatenate.
    (B, c1, H, W) -> (B, c2, H/2, W/2)."""

    def __init__(self, c1: int, c2: int) -> None:
        super().__init__()
        self.c = c2 // 2
        self.cv1 = Conv(c1 // 2, self.c, 3, 2, 1)
        self.cv2 = Conv(c1 // 2, self.c, 1, 1, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = _smooth(x).chunk(2, 1)
        return torch.cat((self.cv1(a), self.cv2(F.max_pool2d(b, 3, 2, 1))), 1)


class AConv(nn.Module):
    """Smooth, then a 3x3 stride-2 :class:`Conv`. (B, c1, H, W) -> (B, c2, H/2, W/2)."""

    def __init__(self, c1: int, c2: int) -> None:
        super().__init__()
        self.cv1 = Conv(c1, c2, 3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv1(_smooth(x))
