"""Anchor-free detection head (YOLOv8 / YOLO11): decoupled box and class branches per level, box
sides as distributions over reg_max bins (distribution focal loss), decoded by their expectation."""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from vision_attn.models.yolo.blocks import Conv, DWConv

__all__ = ["DFL", "Detect", "make_anchors"]


class DFL(nn.Module):
    """Expectation of each box side's distribution over reg_max bins: (B, 4*reg_max, A) -> (B, 4, A).
    A fixed (non-trainable) 1x1 convolution with weights 0..reg_max-1."""

    def __init__(self, reg_max: int = 16) -> None:
        super().__init__()
        self.conv = nn.Conv2d(reg_max, 1, 1, bias=False).requires_grad_(False)
        with torch.no_grad():
            self.conv.weight.copy_(torch.arange(reg_max, dtype=torch.float32).view(1, reg_max, 1, 1))
        self.reg_max = reg_max

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, a = x.shape
        return self.conv(x.view(b, 4, self.reg_max, a).transpose(2, 1).softmax(1)).view(b, 4, a)


def make_anchors(feats: Sequence[torch.Tensor], strides: torch.Tensor, offset: float = 0.5
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Cell centres (A, 2) in grid units and the stride of each (A, 1), over all levels."""
    points, stride_list = [], []
    for i, f in enumerate(feats):
        h, w = f.shape[-2:]
        sy = torch.arange(h, device=f.device, dtype=f.dtype) + offset
        sx = torch.arange(w, device=f.device, dtype=f.dtype) + offset
        yy, xx = torch.meshgrid(sy, sx, indexing="ij")
        points.append(torch.stack((xx, yy), -1).view(-1, 2))
        stride_list.append(strides[i].to(device=f.device, dtype=f.dtype).expand(h * w, 1))
    return torch.cat(points), torch.cat(stride_list)


class Detect(nn.Module):
    """Detection head over levels with channels ``ch``.

    Training: a list of (B, 4*reg_max + nc, H_i, W_i) maps. Eval: (B, 4 + nc, A) with boxes as
    (cx, cy, w, h) in input pixels and class probabilities, A the cells of all levels. ``legacy``
    (YOLOv8) gives the class branch two 3x3 convolutions; otherwise (YOLO11) depth-wise + 1x1 pairs.
    ``stride`` is set by the builder's probe forward.
    """

    def __init__(self, nc: int = 80, reg_max: int = 16, ch: Sequence[int] = (), *, legacy: bool = True) -> None:
        super().__init__()
        self.nc, self.nl, self.reg_max = nc, len(ch), reg_max
        self.no = nc + 4 * reg_max
        self.register_buffer("stride", torch.zeros(self.nl), persistent=False)
        c2 = max(16, ch[0] // 4, 4 * reg_max)
        c3 = max(ch[0], min(nc, 100))
        self.cv2 = nn.ModuleList(nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * reg_max, 1))
                                 for x in ch)
        if legacy:
            self.cv3 = nn.ModuleList(nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for x in ch)
        else:
            self.cv3 = nn.ModuleList(nn.Sequential(nn.Sequential(DWConv(x, x, 3), Conv(x, c3, 1)),
                                                   nn.Sequential(DWConv(c3, c3, 3), Conv(c3, c3, 1)),
                                                   nn.Conv2d(c3, nc, 1)) for x in ch)
        self.dfl = DFL(reg_max) if reg_max > 1 else nn.Identity()

    def raw(self, xs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Per level (B, 4*reg_max + nc, H_i, W_i): box distributions then class logits."""
        return [torch.cat((b(x), c(x)), 1) for x, b, c in zip(xs, self.cv2, self.cv3)]

    def decode(self, feats: Sequence[torch.Tensor]) -> torch.Tensor:
        """Raw maps -> (B, 4 + nc, A): (cx, cy, w, h) in pixels, class probabilities."""
        b = feats[0].shape[0]
        flat = torch.cat([f.view(b, self.no, -1) for f in feats], 2)
        box, cls = flat.split((4 * self.reg_max, self.nc), 1)
        anchors, strides = make_anchors(feats, self.stride)
        lt, rb = self.dfl(box).chunk(2, 1)  # distances to the left/top and right/bottom sides
        centre = anchors.T.unsqueeze(0)
        x1y1, x2y2 = centre - lt, centre + rb
        xywh = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * strides.T.unsqueeze(0)
        return torch.cat((xywh, cls.sigmoid()), 1)

    def forward(self, xs: list[torch.Tensor]) -> list[torch.Tensor] | torch.Tensor:
        feats = self.raw(xs)
        return feats if self.training else self.decode(feats)

    def init_biases(self, strides: Sequence[float]) -> None:
        """Box logits 1.0; class logits for about 5 objects per 640 px image over nc classes."""
        with torch.no_grad():
            for b, c, s in zip(self.cv2, self.cv3, strides):
                b[-1].bias.fill_(1.0)
                c[-1].bias[: self.nc].fill_(math.log(5 / self.nc / (640 / s) ** 2))
