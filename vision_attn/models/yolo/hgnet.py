"""PP-HGNetV2 rows (the backbone of rtdetr-l.yaml and rtdetr-x.yaml): ``HGStem`` and ``HGBlock``.

HGNet ("high-performance GPU net") stacks plain convolutions and keeps every intermediate map: an
HGBlock runs ``n`` convolutions one after another, concatenates the input with all their outputs and
squeezes the result with two 1x1 convolutions (an aggregation like VoVNet's one-shot aggregation).
The light form replaces each k x k convolution by :class:`LightConv`, a 1x1 convolution followed by a
depth-wise k x k one. Activations are ReLU throughout, as in PaddleDetection's network.

Rows (ultralytics' parser): ``[-1, 1, HGStem, [cm, c2]]`` and ``[-1, n, HGBlock, [cm, c2, k, light,
shortcut]]``; the channel counts are used as written (never scaled by width) and an HGBlock row's
repeats become its ``n`` convolutions. State-dict keys equal ultralytics' (``stem1.conv.weight``,
``m.0.conv1.conv.weight``, ``sc.bn.running_var``, ...).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.models.yolo.conv import Conv, DWConv

__all__ = ["HGStem", "HGBlock", "LightConv"]


class LightConv(nn.Module):
    """A 1x1 :class:`Conv` without activation, then a depth-wise k x k :class:`DWConv` with ``act``:
    (B, c1, H, W) -> (B, c2, H, W)."""

    def __init__(self, c1: int, c2: int, k: int = 1, act: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = Conv(c1, c2, 1, act=False)
        self.conv2 = DWConv(c2, c2, k, act=nn.ReLU() if act is None else act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x))


class HGStem(nn.Module):
    """The stem: a 3x3 stride-2 convolution, then two branches of the (right/bottom padded) map, a
    2x2 max pooling and two 2x2 convolutions (to cm/2 and back to cm), concatenated and reduced by a
    3x3 stride-2 and a 1x1 convolution. (B, c1, H, W) -> (B, c2, H/4, W/4)."""

    def __init__(self, c1: int, cm: int, c2: int) -> None:
        super().__init__()
        self.stem1 = Conv(c1, cm, 3, 2, act=nn.ReLU())
        self.stem2a = Conv(cm, cm // 2, 2, 1, 0, act=nn.ReLU())
        self.stem2b = Conv(cm // 2, cm, 2, 1, 0, act=nn.ReLU())
        self.stem3 = Conv(cm * 2, cm, 3, 2, act=nn.ReLU())
        self.stem4 = Conv(cm, c2, 1, 1, act=nn.ReLU())
        self.pool = nn.MaxPool2d(kernel_size=2, stride=1, padding=0, ceil_mode=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.pad(self.stem1(x), [0, 1, 0, 1])  # (B, cm, H/2 + 1, W/2 + 1)
        branch = self.stem2b(F.pad(self.stem2a(x), [0, 1, 0, 1]))  # (B, cm, H/2, W/2)
        x = torch.cat([self.pool(x), branch], dim=1)  # (B, 2 cm, H/2, W/2)
        return self.stem4(self.stem3(x))  # (B, c2, H/4, W/4)


class HGBlock(nn.Module):
    """``n`` convolutions (k x k :class:`Conv`, or :class:`LightConv` when ``lightconv``) in sequence to
    ``cm`` channels; the input and all their outputs concatenated (c1 + n cm channels), squeezed to
    c2/2 and expanded to c2 by 1x1 convolutions; plus the input when ``shortcut`` and c1 == c2.
    (B, c1, H, W) -> (B, c2, H, W)."""

    def __init__(self, c1: int, cm: int, c2: int, k: int = 3, n: int = 6, lightconv: bool = False,
                 shortcut: bool = False, act: nn.Module | None = None) -> None:
        super().__init__()
        if n < 1:
            raise ValueError(f"HGBlock needs n >= 1 convolutions, got {n}")
        act = nn.ReLU() if act is None else act
        if lightconv:
            self.m = nn.ModuleList(LightConv(c1 if i == 0 else cm, cm, k=k, act=act) for i in range(n))
        else:
            self.m = nn.ModuleList(Conv(c1 if i == 0 else cm, cm, k=k, act=act) for i in range(n))
        self.sc = Conv(c1 + n * cm, c2 // 2, 1, 1, act=act)  # squeeze
        self.ec = Conv(c2 // 2, c2, 1, 1, act=act)  # excitation
        self.add = bool(shortcut) and c1 == c2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        maps = [x]
        for m in self.m:
            maps.append(m(maps[-1]))
        y = self.ec(self.sc(torch.cat(maps, 1)))  # (B, c1 + n cm, H, W) -> (B, c2, H, W)
        return y + x if self.add else y
