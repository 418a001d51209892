"""Convolutional blocks of YOLO-style detectors (v5/v8/11 layouts), written from their architecture.

Every block maps a (B, c1, H, W) tensor to (B, c2, H', W'); the constructor takes ``c1, c2`` first,
then the arguments a YAML row gives. Parameter counts and state-dict keys equal ultralytics' (so
``model.N.cv1.conv.weight`` means the same tensor in both).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

__all__ = ["autopad", "Conv", "DWConv", "Bottleneck", "C2f", "C3", "C3k", "C3k2", "SPP", "SPPF", "Concat"]


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


class Bottleneck(nn.Module):
    """Two convolutions (kernels k[0], k[1]) through c2*e hidden channels, plus the input when
    ``shortcut`` and c1 == c2: (B, c1, H, W) -> (B, c2, H, W)."""

    def __init__(self, c1: int, c2: int, shortcut: bool = True, g: int = 1, k: Sequence[int] = (3, 3),
                 e: float = 0.5) -> None:
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, k[0], 1)
        self.cv2 = Conv(c_, c2, k[1], 1, g=g)
        self.add = bool(shortcut) and c1 == c2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """CSP block with two convolutions (YOLOv8): split cv1's output in two halves, run n bottlenecks on
    the second, concatenate every intermediate ((2 + n) * c channels) and fuse with cv2.
    (B, c1, H, W) -> (B, c2, H, W)."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = False, g: int = 1, e: float = 0.5) -> None:
        super().__init__()
        self.c = int(c2 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, self.c, shortcut, g, k=(3, 3), e=1.0) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class C3(nn.Module):
    """CSP block with three convolutions (YOLOv5): cv3([m(cv1(x)), cv2(x)]), n bottlenecks (1x1 then
    3x3) at c2*e channels. (B, c1, H, W) -> (B, c2, H, W)."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = True, g: int = 1, e: float = 0.5) -> None:
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c1, c_, 1, 1)
        self.cv3 = Conv(2 * c_, c2, 1)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, g, k=(1, 3), e=1.0) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class C3k(C3):
    """:class:`C3` whose bottlenecks use k x k kernels for both convolutions."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = True, g: int = 1, e: float = 0.5,
                 k: int = 3) -> None:
        super().__init__(c1, c2, n, shortcut, g, e)
        c_ = int(c2 * e)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, g, k=(k, k), e=1.0) for _ in range(n)))


class C3k2(C2f):
    """YOLO11's :class:`C2f` whose inner blocks are bottlenecks (hidden c/2), :class:`C3k` blocks
    (``c3k``), or a bottleneck followed by a position-sensitive attention block (``attn``)."""

    def __init__(self, c1: int, c2: int, n: int = 1, c3k: bool = False, e: float = 0.5, attn: bool = False,
                 g: int = 1, shortcut: bool = True) -> None:
        super().__init__(c1, c2, n, shortcut, g, e)
        from vision_attn.models.yolo.psa import PSABlock

        def inner() -> nn.Module:
            if attn:
                return nn.Sequential(Bottleneck(self.c, self.c, shortcut, g),
                                     PSABlock(self.c, attn_ratio=0.5, num_heads=max(self.c // 64, 1)))
            if c3k:
                return C3k(self.c, self.c, 2, shortcut, g)
            return Bottleneck(self.c, self.c, shortcut, g)

        self.m = nn.ModuleList(inner() for _ in range(n))


class SPPF(nn.Module):
    """Fast spatial pyramid pooling: cv1 to c1/2 channels, n chained k x k max-pools, concatenate the
    n + 1 maps, cv2 to c2. (B, c1, H, W) -> (B, c2, H, W). ``cv1_act``: SiLU after cv1 (the v8/11
    form); the builder turns it off for rows that give ``n`` (the YOLO26 form)."""

    def __init__(self, c1: int, c2: int, k: int = 5, n: int = 3, shortcut: bool = False, *,
                 cv1_act: bool = True) -> None:
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1, 1, act=cv1_act)
        self.cv2 = Conv(c_ * (n + 1), c2, 1, 1)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)
        self.n = n
        self.add = bool(shortcut) and c1 == c2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        for _ in range(self.n):
            y.append(self.m(y[-1]))
        out = self.cv2(torch.cat(y, 1))
        return out + x if self.add else out


class SPP(nn.Module):
    """Spatial pyramid pooling (YOLOv3): parallel max-pools of sizes k, concatenated with their input.
    (B, c1, H, W) -> (B, c2, H, W)."""

    def __init__(self, c1: int, c2: int, k: Sequence[int] = (5, 9, 13)) -> None:
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c_ * (len(k) + 1), c2, 1, 1)
        self.m = nn.ModuleList(nn.MaxPool2d(kernel_size=x, stride=1, padding=x // 2) for x in k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        return self.cv2(torch.cat([x] + [m(x) for m in self.m], 1))


class Concat(nn.Module):
    """Concatenate a list of tensors along ``dimension`` (channels by default)."""

    def __init__(self, dimension: int = 1) -> None:
        super().__init__()
        self.d = dimension

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(xs, self.d)
