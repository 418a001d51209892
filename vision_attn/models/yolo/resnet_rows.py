"""ResNet rows of the ultralytics schema (``ResNetLayer``), as in yolov8-cls-resnet50/101.yaml.

A row ``[-1, 1, ResNetLayer, [c1, c2, s, is_first, n, e]]`` is either the ResNet stem
(``is_first``: a 7x7 stride-2 :class:`~vision_attn.models.yolo.conv.Conv` to ``c2`` channels, then a
3x3 stride-2 max pooling: stride 4 in all) or a stage of ``n`` bottleneck blocks whose first has stride
``s`` (output ``e * c2`` channels, ``e`` = 4 by default). State-dict keys equal ultralytics'
(``layer.0.conv``, ``layer.i.cv1..cv3``, ``layer.i.shortcut.0``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.models.yolo.conv import Conv

__all__ = ["ResNetBlock", "ResNetLayer", "resnet_layer_channels"]


class ResNetBlock(nn.Module):
    """Bottleneck block: 1x1 to ``c2``, 3x3 (stride ``s``), 1x1 to ``e * c2`` without activation, plus
    the input (through a strided 1x1 :class:`Conv` without activation when the shape changes), then ReLU.
    (B, c1, H, W) -> (B, e * c2, H/s, W/s)."""

    def __init__(self, c1: int, c2: int, s: int = 1, e: int = 4) -> None:
        super().__init__()
        c_out = e * c2
        self.cv1 = Conv(c1, c2, 1, 1)
        self.cv2 = Conv(c2, c2, 3, s, p=1)
        self.cv3 = Conv(c2, c_out, 1, act=False)
        same = s == 1 and c1 == c_out
        self.shortcut: nn.Module = nn.Identity() if same else nn.Sequential(Conv(c1, c_out, 1, s, act=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.cv3(self.cv2(self.cv1(x))) + self.shortcut(x))


class ResNetLayer(nn.Module):
    """The stem (``is_first``: (B, c1, H, W) -> (B, c2, H/4, W/4)) or a stage of ``n`` :class:`ResNetBlock`
    (the first with stride ``s``): (B, c1, H, W) -> (B, e * c2, H/s, W/s)."""

    def __init__(self, c1: int, c2: int, s: int = 1, is_first: bool = False, n: int = 1, e: int = 4) -> None:
        super().__init__()
        if n < 1 or e < 1 or s < 1:
            raise ValueError(f"ResNetLayer needs n >= 1 blocks, expansion e >= 1 and stride s >= 1 "
                             f"(got n={n}, e={e}, s={s})")
        self.is_first = bool(is_first)
        self.out_channels = resnet_layer_channels(c2, is_first, e)
        if self.is_first:
            self.layer = nn.Sequential(Conv(c1, c2, 7, 2, p=3), nn.MaxPool2d(3, 2, 1))
        else:
            blocks = [ResNetBlock(c1 if i == 0 else e * c2, c2, s if i == 0 else 1, e) for i in range(n)]
            self.layer = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


def resnet_layer_channels(c2: int, is_first: bool, e: int = 4) -> int:
    """Output channels of a :class:`ResNetLayer`: ``c2`` for the stem, ``e * c2`` for a stage."""
    return c2 if is_first else e * c2
