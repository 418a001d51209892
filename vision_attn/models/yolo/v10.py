"""YOLOv10's efficiency blocks: the spatial-channel decoupled downsampling (SCDown) and the compact
inverted block (CIB, C2fCIB), optionally with a large-kernel depth-wise branch (RepVGGDW)."""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.models.yolo.blocks import C2f
from vision_attn.models.yolo.conv import Conv

__all__ = ["SCDown", "RepVGGDW", "CIB", "C2fCIB"]


class SCDown(nn.Module):
    """A 1x1 :class:`Conv` to c2 channels, then a depth-wise k x k convolution of stride s (no
    activation): channels and resolution change in two cheap steps. (B, c1, H, W) -> (B, c2, H/s, W/s)."""

    def __init__(self, c1: int, c2: int, k: int = 3, s: int = 2) -> None:
        super().__init__()
        self.cv1 = Conv(c1, c2, 1, 1)
        self.cv2 = Conv(c2, c2, k, s, g=c2, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv2(self.cv1(x))


class RepVGGDW(nn.Module):
    """SiLU of a depth-wise 7x7 plus a depth-wise 3x3 :class:`Conv` (both without activation), which
    add up to one 7x7 kernel after training. (B, c, H, W) -> same."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = Conv(c, c, 7, 1, 3, g=c, act=False)
        self.conv1 = Conv(c, c, 3, 1, 1, g=c, act=False)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv(x) + self.conv1(x))


class CIB(nn.Module):
    """Compact inverted block: depth-wise 3x3, 1x1 to 2c_ (c_ = c2 * e), depth-wise 3x3 (or
    :class:`RepVGGDW` when ``lk``), 1x1 to c2, depth-wise 3x3; plus the input when ``shortcut`` and
    c1 == c2. (B, c1, H, W) -> (B, c2, H, W)."""

    def __init__(self, c1: int, c2: int, shortcut: bool = True, e: float = 0.5, lk: bool = False) -> None:
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = nn.Sequential(
            Conv(c1, c1, 3, g=c1),
            Conv(c1, 2 * c_, 1),
            RepVGGDW(2 * c_) if lk else Conv(2 * c_, 2 * c_, 3, g=2 * c_),
            Conv(2 * c_, c2, 1),
            Conv(c2, c2, 3, g=c2),
        )
        self.add = bool(shortcut) and c1 == c2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv1(x)
        return x + y if self.add else y


class C2fCIB(C2f):
    """:class:`C2f` whose n inner blocks are :class:`CIB` (``lk``: with the large-kernel branch)."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = False, lk: bool = False, g: int = 1,
                 e: float = 0.5) -> None:
        super().__init__(c1, c2, n, shortcut, g, e, block=lambda c: CIB(c, c, shortcut, e=1.0, lk=lk))
