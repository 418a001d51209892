"""Keypoint heads: YOLOv8 / YOLO11 / YOLO12 (``Pose``) and YOLO26 (``Pose26``).

A keypoint head is a :class:`~vision_attn.models.yolo.detect.Detect` head plus, per level, a branch
``cv4`` that predicts ``nk = K * D`` numbers for every cell: for each of the K keypoints of ``kpt_shape``
(K, D) its x and y (and, with D = 3, a visibility logit). ``Pose`` decodes a keypoint as
``(2 * k + centre - 0.5) * stride`` (``centre`` the cell centre in grid units), ``Pose26`` as
``(k + centre) * stride``; a visibility becomes its sigmoid.

``Pose26`` (YOLO26) splits the branch in a shared trunk ``cv4`` (3x3, 3x3), the keypoint outputs
``cv4_kpts`` (1x1 to nk) and, for training only, ``cv4_sigma`` (1x1 to 2K: each keypoint's x and y scale
of the residual log-likelihood loss), and holds that loss's flow ``flow_model``
(:class:`~vision_attn.models.yolo.realnvp.RealNVP`).

Output format (the shared contract of the keypoint task):

- training, plain head: ``{"feats": [(B, 4*reg_max + nc, H_i, W_i) per level], "kpts": (B, nk, A)}``
  (raw keypoint outputs, per keypoint x, y[, visibility logit]), plus ``"kpts_sigma": (B, 2K, A)`` for
  ``Pose26``;
- training, end-to-end head (``end2end: True``, yolo26-pose): ``{"one2many": dict, "one2one": dict}``,
  each as above, the one-to-one branch on detached features (as :class:`Detect`'s);
- eval: (B, 4 + nc + nk, A): boxes (cx, cy, w, h) in input pixels, class probabilities, then the
  decoded keypoints (x, y in input pixels[, visibility probability]) (of the one-to-one branch while
  ``end2end`` is True).
"""
from __future__ import annotations

import copy
from typing import Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.yolo.conv import Conv
from vision_attn.models.yolo.detect import Detect, make_anchors, per_cell
from vision_attn.models.yolo.realnvp import RealNVP

__all__ = ["Pose", "Pose26", "check_kpt_shape"]

PoseOutput = dict[str, torch.Tensor | list[torch.Tensor]]
"""One branch's training output: ``feats`` (a list of maps), ``kpts`` (and ``kpts_sigma``)."""

MAX_KEYPOINTS = 1024


def check_kpt_shape(value: object) -> tuple[int, int]:
    """``kpt_shape`` as (K, D): K keypoints 1..1024, D 2 (x, y) or 3 (x, y, visibility)."""
    ok = (isinstance(value, (list, tuple)) and len(value) == 2
          and all(isinstance(v, int) and not isinstance(v, bool) for v in value))
    if not ok or not 1 <= value[0] <= MAX_KEYPOINTS or value[1] not in (2, 3):  # type: ignore[index]
        raise ConfigError(f"kpt_shape {value!r} must be [keypoints, dims]: 1 to {MAX_KEYPOINTS} keypoints, dims 2 "
                          "(x, y) or 3 (x, y, visibility), e.g. [17, 3]")
    return int(value[0]), int(value[1])  # type: ignore[index]


class Pose(Detect):
    """:class:`Detect` plus the keypoint branch ``cv4`` (3x3, 3x3, 1x1 to nk, width ``max(ch[0] // 4, nk)``;
    ``one2one_cv4`` too in an end-to-end head). Output format: the module docstring."""

    def __init__(self, nc: int = 80, kpt_shape: Sequence[int] = (17, 3), reg_max: int = 16, ch: Sequence[int] = (),
                 *, legacy: bool = True, end2end: bool = False) -> None:
        super().__init__(nc, reg_max, ch, legacy=legacy, end2end=end2end)
        self.kpt_shape = check_kpt_shape(tuple(kpt_shape))
        self.nk = self.kpt_shape[0] * self.kpt_shape[1]
        self.cv4 = self._keypoint_trunk(ch)
        self.one2one_cv4: nn.ModuleList | None = copy.deepcopy(self.cv4) if end2end else None

    def _keypoint_trunk(self, ch: Sequence[int]) -> nn.ModuleList:
        c4 = max(ch[0] // 4, self.nk)
        return nn.ModuleList(nn.Sequential(Conv(x, c4, 3), Conv(c4, c4, 3), nn.Conv2d(c4, self.nk, 1)) for x in ch)

    def keypoint_outputs(self, xs: Sequence[torch.Tensor], one2one: bool = False) -> dict[str, torch.Tensor]:
        """``{"kpts": (B, nk, A)}``, the raw keypoint outputs of every cell, of either branch."""
        return {"kpts": per_cell(self.one2one_cv4 if one2one else self.cv4, xs, self.nk)}

    def keypoint_offsets(self, kpts_xy: torch.Tensor) -> torch.Tensor:
        """Raw x or y outputs -> offsets from the cell centre, grid units: ``2 * k - 0.5``."""
        return kpts_xy * 2.0 - 0.5

    def decode_keypoints(self, kpts: torch.Tensor, feats: Sequence[torch.Tensor]) -> torch.Tensor:
        """Raw keypoints (B, nk, A) of the levels ``feats`` -> x, y in input pixels (and the visibility
        probability), same shape."""
        anchors, strides = make_anchors(feats, self.stride)
        k, d = self.kpt_shape
        y = kpts.view(kpts.shape[0], k, d, -1)
        xy = (self.keypoint_offsets(y[:, :, :2]) + anchors.transpose(0, 1).view(1, 1, 2, -1)) * strides.view(1, 1, 1, -1)
        out = torch.cat((xy, y[:, :, 2:].sigmoid()), 2)
        return out.view(kpts.shape)

    def _branch_output(self, xs: Sequence[torch.Tensor], one2one: bool) -> PoseOutput:
        feats = self.raw_one2one(xs) if one2one else self.raw(xs)
        return {"feats": feats, **self.keypoint_outputs(xs, one2one)}

    def forward(self, xs: list[torch.Tensor]) -> PoseOutput | dict[str, PoseOutput] | torch.Tensor:  # type: ignore[override]
        if self.training:
            one2many = self._branch_output(xs, one2one=False)
            if not self.has_one2one:
                return one2many
            return {"one2many": one2many, "one2one": self._branch_output([x.detach() for x in xs], one2one=True)}
        out = self._branch_output(xs, one2one=self.end2end)
        feats = out["feats"]
        return torch.cat((self.decode(feats), self.decode_keypoints(out["kpts"], feats)), 1)


class Pose26(Pose):
    """YOLO26's keypoint head: a shared trunk ``cv4`` (3x3, 3x3, width ``max(ch[0] // 4, K * (D + 2))``),
    keypoint outputs ``cv4_kpts``, training-only scales ``cv4_sigma`` (2K per cell) and the loss's flow
    ``flow_model``; keypoints decode as ``(k + centre) * stride``. Output format: the module docstring."""

    def __init__(self, nc: int = 80, kpt_shape: Sequence[int] = (17, 3), reg_max: int = 16, ch: Sequence[int] = (),
                 *, legacy: bool = True, end2end: bool = False) -> None:
        super().__init__(nc, kpt_shape, reg_max, ch, legacy=legacy, end2end=end2end)
        self.flow_model = RealNVP()
        c4 = self.cv4[0][-1].conv.out_channels
        k = self.kpt_shape[0]
        self.nk_sigma = 2 * k
        self.cv4_kpts = nn.ModuleList(nn.Conv2d(c4, self.nk, 1) for _ in ch)
        self.cv4_sigma = nn.ModuleList(nn.Conv2d(c4, self.nk_sigma, 1) for _ in ch)
        self.one2one_cv4_kpts: nn.ModuleList | None = copy.deepcopy(self.cv4_kpts) if end2end else None
        self.one2one_cv4_sigma: nn.ModuleList | None = copy.deepcopy(self.cv4_sigma) if end2end else None

    def _keypoint_trunk(self, ch: Sequence[int]) -> nn.ModuleList:
        k, d = self.kpt_shape
        c4 = max(ch[0] // 4, k * (d + 2))
        return nn.ModuleList(nn.Sequential(Conv(x, c4, 3), Conv(c4, c4, 3)) for x in ch)

    def keypoint_outputs(self, xs: Sequence[torch.Tensor], one2one: bool = False) -> dict[str, torch.Tensor]:
        """``{"kpts": (B, nk, A)}`` of either branch, and in training ``"kpts_sigma": (B, 2K, A)``."""
        trunk, kpts, sigma = ((self.one2one_cv4, self.one2one_cv4_kpts, self.one2one_cv4_sigma) if one2one
                              else (self.cv4, self.cv4_kpts, self.cv4_sigma))
        if trunk is None or kpts is None or sigma is None:
            raise ConfigError("this Pose26 head has no one-to-one branch; build it with 'end2end: True'")
        features = [t(x) for t, x in zip(trunk, xs)]
        out = {"kpts": per_cell(kpts, features, self.nk)}
        if self.training:
            out["kpts_sigma"] = per_cell(sigma, features, self.nk_sigma)
        return out

    def keypoint_offsets(self, kpts_xy: torch.Tensor) -> torch.Tensor:
        return kpts_xy
