"""Instance-segmentation heads: YOLOv8 / YOLO11 / YOLO12 / YOLOv9 (``Segment``) and YOLO26 (``Segment26``).

A segmentation head is a :class:`~vision_attn.models.yolo.detect.Detect` head plus, per level, a branch
``cv4`` that predicts ``nm`` mask coefficients for every cell, and a prototype branch ``proto`` that turns
the finest level (stride 8) into ``nm`` prototype masks at a quarter of the input's side. An instance's
mask is ``sigmoid(coeffs @ protos)`` cropped to its box (:mod:`vision_attn.models.yolo.masks`).

``Segment26`` (YOLO26) builds its prototypes from all levels (:class:`Proto26`: the coarser levels
projected to the finest one's channels, upsampled and added) and has a semantic branch ``semseg``
(per-class logits on the fused map) that only training uses.

Output format (the shared contract of the segment task):

- training, plain head: ``{"feats": [(B, 4*reg_max + nc, H_i, W_i) per level], "coeffs": (B, nm, A),
  "protos": (B, nm, Hp, Wp)}``, plus ``"semantic": (B, nc, H_0, W_0)`` for ``Segment26``;
- training, end-to-end head (``end2end: True``, yolo26-seg): ``{"one2many": dict, "one2one": dict}``,
  each as above; the one-to-one feats and coeffs come from detached features (as :class:`Detect`'s),
  its protos (and semantic logits) are the same tensors detached, so its loss trains only its own
  branches;
- eval: ``(pred, protos)``: ``pred`` (B, 4 + nc + nm, A): boxes (cx, cy, w, h) in input pixels, class
  probabilities, mask coefficients (of the one-to-one branch while ``end2end`` is True); ``protos``
  (B, nm, Hp, Wp), Hp = H / 4.
"""
from __future__ import annotations

import copy
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.models.yolo.conv import Conv
from vision_attn.models.yolo.detect import Detect, per_cell

__all__ = ["Proto", "Proto26", "Segment", "Segment26"]

SegmentOutput = dict[str, torch.Tensor | list[torch.Tensor]]
"""One branch's training output: ``feats`` (a list of maps), ``coeffs``, ``protos`` (and ``semantic``)."""


class Proto(nn.Module):
    """Prototype masks from one map: (B, c1, H, W) -> (B, c2, 2H, 2W).

    A 3x3 convolution to ``c_`` channels, a learned 2x upsampling (transposed 2x2 convolution, stride 2),
    a 3x3 convolution and a 1x1 convolution to the ``c2`` prototypes.
    """

    def __init__(self, c1: int, c_: int = 256, c2: int = 32) -> None:
        super().__init__()
        self.cv1 = Conv(c1, c_, 3)
        self.upsample = nn.ConvTranspose2d(c_, c_, 2, 2, 0, bias=True)
        self.cv2 = Conv(c_, c_, 3)
        self.cv3 = Conv(c_, c2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(self.cv2(self.upsample(self.cv1(x))))


class Proto26(Proto):
    """YOLO26's prototypes from all levels ``ch`` (finest first): each coarser level projected by a 1x1
    convolution to ``ch[0]`` channels, upsampled (nearest) to the finest level's size and added to it;
    the sum goes through a 3x3 convolution to ``c_`` channels and then :class:`Proto`.

    ``semseg`` (3x3, 3x3, 1x1 to ``nc``) gives per-class logits on the summed map: training's
    auxiliary semantic loss; prediction never runs it.
    """

    def __init__(self, ch: Sequence[int] = (), c_: int = 256, c2: int = 32, nc: int = 80) -> None:
        super().__init__(c_, c_, c2)
        self.feat_refine = nn.ModuleList(Conv(x, ch[0], 1) for x in ch[1:])
        self.feat_fuse = Conv(ch[0], c_, 3)
        self.semseg = nn.Sequential(Conv(ch[0], c_, 3), Conv(c_, c_, 3), nn.Conv2d(c_, nc, 1))

    def fuse_levels(self, xs: Sequence[torch.Tensor]) -> torch.Tensor:
        """Levels (B, ch[i], H/2^i, W/2^i) -> their sum at the finest level, (B, ch[0], H, W)."""
        out = xs[0]
        for i, refine in enumerate(self.feat_refine):
            out = out + F.interpolate(refine(xs[i + 1]), scale_factor=2 ** (i + 1), mode="nearest")
        return out

    def prototypes(self, fused: torch.Tensor) -> torch.Tensor:
        """The summed map (B, ch[0], H, W) -> prototypes (B, c2, 2H, 2W)."""
        return super().forward(self.feat_fuse(fused))

    def semantic(self, fused: torch.Tensor) -> torch.Tensor:
        """The summed map (B, ch[0], H, W) -> semantic logits (B, nc, H, W)."""
        return self.semseg(fused)

    def forward(self, xs: Sequence[torch.Tensor]) -> torch.Tensor:  # type: ignore[override]
        return self.prototypes(self.fuse_levels(xs))


class Segment(Detect):
    """:class:`Detect` plus mask coefficients (``cv4``: 3x3, 3x3, 1x1 to ``nm`` per level, width
    ``max(ch[0] // 4, nm)``) and prototypes (``proto``: :class:`Proto` on the finest level, ``npr``
    channels inside, ``nm`` out). End-to-end heads also hold ``one2one_cv4``. Output format: the
    module docstring."""

    def __init__(self, nc: int = 80, nm: int = 32, npr: int = 256, reg_max: int = 16, ch: Sequence[int] = (), *,
                 legacy: bool = True, end2end: bool = False) -> None:
        super().__init__(nc, reg_max, ch, legacy=legacy, end2end=end2end)
        self.nm, self.npr = nm, npr
        self.proto = self._make_proto(ch, npr, nm, nc)
        c4 = max(ch[0] // 4, nm)
        self.cv4 = nn.ModuleList(nn.Sequential(Conv(x, c4, 3), Conv(c4, c4, 3), nn.Conv2d(c4, nm, 1)) for x in ch)
        self.one2one_cv4: nn.ModuleList | None = copy.deepcopy(self.cv4) if end2end else None

    def _make_proto(self, ch: Sequence[int], npr: int, nm: int, nc: int) -> nn.Module:
        return Proto(ch[0], npr, nm)

    def coefficients(self, xs: Sequence[torch.Tensor], one2one: bool = False) -> torch.Tensor:
        """Mask coefficients of every cell of every level, (B, nm, A), of either branch."""
        return per_cell(self.one2one_cv4 if one2one else self.cv4, xs, self.nm)

    def mask_outputs(self, xs: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
        """``{"protos": (B, nm, Hp, Wp)}`` from the levels (:class:`Segment26` adds its semantic logits
        in training)."""
        return {"protos": self.proto(xs[0])}

    def forward(self, xs: list[torch.Tensor]  # type: ignore[override]
                ) -> SegmentOutput | dict[str, SegmentOutput] | tuple[torch.Tensor, torch.Tensor]:
        masks = self.mask_outputs(xs)
        if self.training:
            one2many: SegmentOutput = {"feats": self.raw(xs), "coeffs": self.coefficients(xs), **masks}
            if not self.has_one2one:
                return one2many
            detached = [x.detach() for x in xs]
            one2one: SegmentOutput = {"feats": self.raw_one2one(detached),
                                      "coeffs": self.coefficients(detached, one2one=True),
                                      **{k: v.detach() for k, v in masks.items()}}
            return {"one2many": one2many, "one2one": one2one}
        feats = self.raw_one2one(xs) if self.end2end else self.raw(xs)
        pred = torch.cat((self.decode(feats), self.coefficients(xs, one2one=self.end2end)), 1)
        return pred, masks["protos"]


class Segment26(Segment):
    """YOLO26's segmentation head: :class:`Segment` with :class:`Proto26` prototypes over all levels
    and, in training, the semantic logits ``"semantic"`` (B, nc, H_0, W_0) of the finest level."""

    def _make_proto(self, ch: Sequence[int], npr: int, nm: int, nc: int) -> nn.Module:
        return Proto26(ch, npr, nm, nc)

    def mask_outputs(self, xs: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
        fused = self.proto.fuse_levels(xs)
        out = {"protos": self.proto.prototypes(fused)}
        if self.training:
            out["semantic"] = self.proto.semantic(fused)
        return out
