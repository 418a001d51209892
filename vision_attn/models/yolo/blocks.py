"""CSP blocks and pooling of YOLO-style detectors (v3/v5/v8/11 layouts), written from their architecture.

Every block maps a (B, c1, H, W) tensor to (B, c2, H', W'); the constructor takes ``c1, c2`` first,
then the arguments a YAML row gives. Parameter counts and state-dict keys equal ultralytics' (so
``model.N.cv1.conv.weight`` means the same tensor in both). The CSP blocks take their inner block as
a factory (``block(c) -> module`` for c hidden channels), so the variants (C3k, C3k2, C3Ghost, RepCSP,
C2fCIB) are one class with another inner block rather than copies.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

from vision_attn.models.yolo.conv import Conv
from vision_attn.models.yolo.psa import PSABlock

__all__ = ["BlockFactory", "Bottleneck", "bottlenecks", "C2", "C2f", "C3", "C3k", "C3k2", "SPP", "SPPF", "Concat"]

BlockFactory = Callable[[int], nn.Module]
"""Builds one inner block of a CSP block for its hidden channel count c (input = output = c)."""


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


def bottlenecks(shortcut: bool, g: int = 1, k: Sequence[int] = (3, 3)) -> BlockFactory:
    """Factory of c -> c :class:`Bottleneck` blocks without channel reduction."""
    return lambda c: Bottleneck(c, c, shortcut, g, k=k, e=1.0)


class C2f(nn.Module):
    """CSP block with two convolutions (YOLOv8): split cv1's output in two halves, run n inner blocks
    (bottlenecks by default) one after the other on the second, concatenate every intermediate
    ((2 + n) * c channels) and fuse with cv2. (B, c1, H, W) -> (B, c2, H, W)."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = False, g: int = 1, e: float = 0.5, *,
                 block: BlockFactory | None = None) -> None:
        super().__init__()
        self.c = int(c2 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        make = block or bottlenecks(shortcut, g)
        self.m = nn.ModuleList(make(self.c) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class C2(nn.Module):
    """CSP block with two convolutions, the YOLOv8-p6 neck form: cv1 to 2c channels, n bottlenecks on
    the first half, concatenated with the second and fused by cv2. (B, c1, H, W) -> (B, c2, H, W)."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = True, g: int = 1, e: float = 0.5) -> None:
        super().__init__()
        self.c = int(c2 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.cv2 = Conv(2 * self.c, c2, 1)
        make = bottlenecks(shortcut, g)
        self.m = nn.Sequential(*(make(self.c) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.cv1(x).chunk(2, 1)
        return self.cv2(torch.cat((self.m(a), b), 1))


class C3(nn.Module):
    """CSP block with three convolutions (YOLOv5): cv3([m(cv1(x)), cv2(x)]), n inner blocks at c2*e
    channels (bottlenecks 1x1 then 3x3 by default). (B, c1, H, W) -> (B, c2, H, W)."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = True, g: int = 1, e: float = 0.5, *,
                 block: BlockFactory | None = None) -> None:
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c1, c_, 1, 1)
        self.cv3 = Conv(2 * c_, c2, 1)
        make = block or bottlenecks(shortcut, g, k=(1, 3))
        self.m = nn.Sequential(*(make(c_) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class C3k(C3):
    """:class:`C3` whose bottlenecks use k x k kernels for both convolutions."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = True, g: int = 1, e: float = 0.5,
                 k: int = 3) -> None:
        super().__init__(c1, c2, n, shortcut, g, e, block=bottlenecks(shortcut, g, k=(k, k)))


class C3k2(C2f):
    """YOLO11's :class:`C2f` whose inner blocks are bottlenecks (hidden c/2), :class:`C3k` blocks
    (``c3k``), or a bottleneck followed by a position-sensitive attention block (``attn``)."""

    def __init__(self, c1: int, c2: int, n: int = 1, c3k: bool = False, e: float = 0.5, attn: bool = False,
                 g: int = 1, shortcut: bool = True) -> None:
        def inner(c: int) -> nn.Module:
            if attn:
                return nn.Sequential(Bottleneck(c, c, shortcut, g),
                                     PSABlock(c, attn_ratio=0.5, num_heads=max(c // 64, 1)))
            if c3k:
                return C3k(c, c, 2, shortcut, g)
            return Bottleneck(c, c, shortcut, g)

        super().__init__(c1, c2, n, shortcut, g, e, block=inner)


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
