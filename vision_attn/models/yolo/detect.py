"""Anchor-free detection heads: YOLOv8 / YOLO11 (one-to-many), YOLO26 and YOLOv10 (end-to-end).

Decoupled box and class branches per level; box sides as distributions over reg_max bins (distribution
focal loss) decoded by their expectation, or, with ``reg_max: 1`` (YOLO26), the four distances
directly.

End-to-end heads (``end2end: True`` in the YAML, and ``v10Detect``) also hold ``one2one_cv2`` /
``one2one_cv3``, copies of the one-to-many branches made at construction; they are trained with a
one-to-one assignment so that each object gets a single box and prediction needs no NMS.

Output format (every head):

- training, plain head: a list over levels of (B, 4*reg_max + nc, H_i, W_i) maps (box logits, then
  class logits);
- training, end-to-end head: ``{"one2many": [maps], "one2one": [maps]}``, each a list as above; the
  one-to-one maps are computed on detached features, so its loss trains only its own branch;
- eval: (B, 4 + nc, A) for the A cells of all levels, boxes (cx, cy, w, h) in input pixels, then
  class probabilities. An end-to-end head decodes its one-to-one branch while ``end2end`` is True
  (the default; then keep the top-k scores, no NMS), else its one-to-many branch (then NMS).
"""
from __future__ import annotations

import copy
import math
from typing import Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.yolo.conv import Conv, DWConv

__all__ = ["DFL", "Detect", "V10Detect", "make_anchors", "per_cell"]


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


def per_cell(branch: Sequence[nn.Module], xs: Sequence[torch.Tensor], channels: int) -> torch.Tensor:
    """A per-level branch's ``channels`` outputs for every cell of every level, (B, channels, A)."""
    b = xs[0].shape[0]
    return torch.cat([h(x).view(b, channels, -1) for x, h in zip(xs, branch)], 2)


class Detect(nn.Module):
    """Detection head over levels with channels ``ch`` (output format: the module docstring).

    ``legacy`` (v3/v5/v8/v9 YAMLs) gives the class branch two 3x3 convolutions; otherwise (YOLO11 and
    later) depth-wise + 1x1 pairs. ``reg_max`` 1 predicts the four box distances directly (no DFL).
    ``end2end`` adds the one-to-one branches. ``stride`` is set by the builder's probe forward.
    """

    def __init__(self, nc: int = 80, reg_max: int = 16, ch: Sequence[int] = (), *, legacy: bool = True,
                 end2end: bool = False) -> None:
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
        self.one2one_cv2: nn.ModuleList | None = copy.deepcopy(self.cv2) if end2end else None
        self.one2one_cv3: nn.ModuleList | None = copy.deepcopy(self.cv3) if end2end else None
        self._end2end = end2end

    @property
    def has_one2one(self) -> bool:
        """Whether the head has the one-to-one (NMS-free) branch."""
        return self.one2one_cv2 is not None

    @property
    def end2end(self) -> bool:
        """Eval decodes the one-to-one branch (predictions then need top-k, not NMS)."""
        return self._end2end

    @end2end.setter
    def end2end(self, value: bool) -> None:
        if value and not self.has_one2one:
            raise ConfigError("this Detect head has no one-to-one branch, so it cannot predict end to end; build "
                              "it from a YAML with 'end2end: True' (as yolo26.yaml) or use v10Detect")
        self._end2end = bool(value)

    @staticmethod
    def _branch(xs: Sequence[torch.Tensor], box: nn.ModuleList, cls: nn.ModuleList) -> list[torch.Tensor]:
        return [torch.cat((b(x), c(x)), 1) for x, b, c in zip(xs, box, cls)]

    def raw(self, xs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Per level (B, 4*reg_max + nc, H_i, W_i) of the one-to-many branch: box logits, class logits."""
        return self._branch(xs, self.cv2, self.cv3)

    def raw_one2one(self, xs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Per level (B, 4*reg_max + nc, H_i, W_i) of the one-to-one branch."""
        if not self.has_one2one:
            raise ConfigError("this Detect head has no one-to-one branch; build it with 'end2end: True'")
        return self._branch(xs, self.one2one_cv2, self.one2one_cv3)

    def distances(self, feats: Sequence[torch.Tensor]
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Raw maps of either branch -> box side distances (B, 4, A) in grid units (left, top, right,
        bottom; clamped at 0 for ``reg_max`` 1), class logits (B, nc, A), cell centres (1, 2, A) in grid
        units and strides (1, 1, A)."""
        b = feats[0].shape[0]
        flat = torch.cat([f.view(b, self.no, -1) for f in feats], 2)
        box, cls = flat.split((4 * self.reg_max, self.nc), 1)
        anchors, strides = make_anchors(feats, self.stride)
        dist = self.dfl(box)  # (B, 4, A) distances to the left, top, right and bottom sides
        if self.reg_max == 1:  # raw distances (no DFL expectation) can be negative early in training
            dist = dist.clamp(min=0)  # so that every box is a valid xyxy box, if a degenerate one
        return dist, cls, anchors.transpose(0, 1).unsqueeze(0), strides.transpose(0, 1).unsqueeze(0)

    def decode(self, feats: Sequence[torch.Tensor]) -> torch.Tensor:
        """Raw maps of either branch -> (B, 4 + nc, A): (cx, cy, w, h) in pixels, class probabilities."""
        dist, cls, centre, strides = self.distances(feats)
        lt, rb = dist.chunk(2, 1)
        x1y1, x2y2 = centre - lt, centre + rb
        xywh = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * strides
        return torch.cat((xywh, cls.sigmoid()), 1)

    def forward(self, xs: list[torch.Tensor]) -> list[torch.Tensor] | dict[str, list[torch.Tensor]] | torch.Tensor:
        if self.training:
            if not self.has_one2one:
                return self.raw(xs)
            return {"one2many": self.raw(xs), "one2one": self.raw_one2one([x.detach() for x in xs])}
        return self.decode(self.raw_one2one(xs) if self._end2end else self.raw(xs))

    def init_biases(self, strides: Sequence[float]) -> None:
        """Box logits 1.0; class logits for about 5 objects per 640 px image over nc classes (both branches)."""
        branches = [(self.cv2, self.cv3)] + ([(self.one2one_cv2, self.one2one_cv3)] if self.has_one2one else [])
        with torch.no_grad():
            for box, cls in branches:
                for b, c, s in zip(box, cls, strides):
                    b[-1].bias.fill_(1.0)
                    c[-1].bias[: self.nc].fill_(math.log(5 / self.nc / (640 / s) ** 2))


class V10Detect(Detect):
    """YOLOv10's head (``v10Detect`` in a YAML): an end-to-end :class:`Detect` with DFL (reg_max 16)
    and the light class branch (depth-wise + 1x1 pairs), whatever the other rows are."""

    def __init__(self, nc: int = 80, ch: Sequence[int] = ()) -> None:
        super().__init__(nc, 16, ch, legacy=False, end2end=True)
