"""Oriented-box heads: YOLOv8 / YOLO11 / YOLO12 (``OBB``) and YOLO26 (``OBB26``).

An oriented-box head is a :class:`~vision_attn.models.yolo.detect.Detect` head plus, per level, a branch
``cv4`` (3x3, 3x3, 1x1 to ``ne`` = 1 channel, width ``max(ch[0] // 4, ne)``) that predicts each cell's
rotation angle. ``OBB`` maps the branch's logit to ``(sigmoid(t) - 0.25) * pi``, an angle in
[-pi/4, 3pi/4); ``OBB26`` uses the raw output as the angle (radians). The four box distances are measured
in the box's own frame: the centre is the cell centre plus the rotated offset ``((r - l) / 2, (b - t) / 2)``
and the size is ``(l + r, t + b)``.

Output format (the shared contract of the oriented-box task):

- training, plain head: ``{"feats": [(B, 4*reg_max + nc, H_i, W_i) per level], "angle": (B, ne, A)}``
  (the angle in radians, as above);
- training, end-to-end head (``end2end: True``, yolo26-obb): ``{"one2many": dict, "one2one": dict}``,
  each as above, the one-to-one branch on detached features (as :class:`Detect`'s);
- eval: (B, 4 + nc + ne, A): each cell's rotated box (cx, cy, w, h) in input pixels, class
  probabilities and the angle in radians (of the one-to-one branch while ``end2end`` is True).
"""
from __future__ import annotations

import copy
import math
from typing import Sequence

import torch
from torch import nn

from vision_attn.models.yolo.conv import Conv
from vision_attn.models.yolo.detect import Detect, per_cell

__all__ = ["OBB", "OBB26", "rotated_centres"]

OBBOutput = dict[str, torch.Tensor | list[torch.Tensor]]
"""One branch's training output: ``feats`` (a list of maps) and ``angle`` (B, ne, A)."""


def rotated_centres(dist: torch.Tensor, angle: torch.Tensor, centre: torch.Tensor) -> torch.Tensor:
    """Distances (..., 4, A) (left, top, right, bottom in the box's frame), angles (..., 1, A) and cell
    centres (..., 2, A) -> rotated boxes (..., 4, A): centre (x, y) and size (w, h), the angle excluded."""
    lt, rb = dist.split(2, dim=-2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    dx, dy = ((rb - lt) / 2).split(1, dim=-2)
    xy = torch.cat((dx * cos - dy * sin, dx * sin + dy * cos), -2) + centre
    return torch.cat((xy, lt + rb), -2)


class OBB(Detect):
    """:class:`Detect` plus the angle branch ``cv4`` (``ne`` outputs per cell; ``one2one_cv4`` too in an
    end-to-end head). Output format: the module docstring."""

    def __init__(self, nc: int = 80, ne: int = 1, reg_max: int = 16, ch: Sequence[int] = (), *, legacy: bool = True,
                 end2end: bool = False) -> None:
        super().__init__(nc, reg_max, ch, legacy=legacy, end2end=end2end)
        self.ne = ne
        c4 = max(ch[0] // 4, ne)
        self.cv4 = nn.ModuleList(nn.Sequential(Conv(x, c4, 3), Conv(c4, c4, 3), nn.Conv2d(c4, ne, 1)) for x in ch)
        self.one2one_cv4: nn.ModuleList | None = copy.deepcopy(self.cv4) if end2end else None

    def angle_of(self, logits: torch.Tensor) -> torch.Tensor:
        """The angle branch's output -> angles in radians: ``(sigmoid - 0.25) * pi``, in [-pi/4, 3pi/4)."""
        return (logits.sigmoid() - 0.25) * math.pi

    def angles(self, xs: Sequence[torch.Tensor], one2one: bool = False) -> torch.Tensor:
        """Every cell's angle (B, ne, A), radians, of either branch."""
        return self.angle_of(per_cell(self.one2one_cv4 if one2one else self.cv4, xs, self.ne))

    def decode_rotated(self, feats: Sequence[torch.Tensor], angle: torch.Tensor) -> torch.Tensor:
        """Raw maps and angles (B, ne, A) of either branch -> (B, 4 + nc + ne, A): rotated (cx, cy, w, h) in
        pixels, class probabilities, angle."""
        dist, cls, centre, strides = self.distances(feats)
        boxes = rotated_centres(dist, angle[:, :1], centre) * strides
        return torch.cat((boxes, cls.sigmoid(), angle), 1)

    def forward(self, xs: list[torch.Tensor]) -> OBBOutput | dict[str, OBBOutput] | torch.Tensor:  # type: ignore[override]
        if self.training:
            one2many: OBBOutput = {"feats": self.raw(xs), "angle": self.angles(xs)}
            if not self.has_one2one:
                return one2many
            detached = [x.detach() for x in xs]
            one2one: OBBOutput = {"feats": self.raw_one2one(detached), "angle": self.angles(detached, one2one=True)}
            return {"one2many": one2many, "one2one": one2one}
        feats = self.raw_one2one(xs) if self.end2end else self.raw(xs)
        return self.decode_rotated(feats, self.angles(xs, one2one=self.end2end))


class OBB26(OBB):
    """YOLO26's oriented-box head: :class:`OBB` whose angle is the branch's raw output (radians)."""

    def angle_of(self, logits: torch.Tensor) -> torch.Tensor:
        return logits
