"""The keypoint loss (ultralytics' ``v8PoseLoss``): the detection loss plus an OKS-based keypoint term and a
keypoint-visibility term.

Each positive anchor decodes its K keypoints (grid units: ``2 * k - 0.5 + centre`` for ``Pose``) and is
compared with the keypoints of the instance it was assigned to (divided by the anchor's stride). Over the
labelled keypoints (visibility not 0), the location term is ``1 - exp(-d^2 / (2 * (2 sigma)^2 * area))``
(the object keypoint similarity's kernel, ``area`` the target box's area in grid units, ``sigma`` the
keypoint's OKS sigma), scaled by ``K / labelled`` per instance and averaged over instances and keypoints;
the visibility term is the BCE of the predicted visibility logit against "labelled", averaged the same way
(heads with ``kpt_shape`` (K, 2) have none).

``total = box_gain * box + pose_gain * pose + kobj_gain * kobj + cls_gain * cls + dfl_gain * dfl``
(7.5, 12, 1, 0.5, 1.5), per image like :class:`~vision_attn.losses.DetectionLoss`.

Sigmas: the data set's (one per keypoint), else COCO's for ``kpt_shape`` (17, 3)
(:data:`vision_attn.data.keypoints.COCO_SIGMAS`, those of pycocotools' keypoint evaluation), else ``1 / K``
each.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.data.keypoints import default_sigmas
from vision_attn.errors import ConfigError, DataError
from vision_attn.losses.detection import DetectionLoss

__all__ = ["PoseLoss", "PoseParts", "keypoint_sigmas", "oks_term", "pad_keypoints"]

@dataclass
class PoseParts:
    """``total`` (with gradients) and the unweighted parts (detached): ``box`` (CIoU), ``pose`` (OKS-based
    location), ``kobj`` (visibility BCE), ``cls`` (BCE), ``dfl``."""

    total: torch.Tensor
    box: torch.Tensor
    pose: torch.Tensor
    kobj: torch.Tensor
    cls: torch.Tensor
    dfl: torch.Tensor


def keypoint_sigmas(kpt_shape: Sequence[int], sigmas: Sequence[float] | torch.Tensor | None = None) -> torch.Tensor:
    """The OKS sigma of each keypoint (K,): ``sigmas`` (checked: K positive numbers), else the data's default
    (:func:`vision_attn.data.keypoints.default_sigmas`: COCO's for (17, 3), else ``1 / K``)."""
    k = int(kpt_shape[0])
    if sigmas is None:
        return torch.tensor(default_sigmas(k, int(kpt_shape[1])), dtype=torch.float32)
    out = torch.as_tensor(sigmas, dtype=torch.float32).flatten()
    if out.numel() != k or not bool((out > 0).all()):
        raise ConfigError(f"keypoint sigmas {out.tolist()} must be {k} positive numbers, one per keypoint")
    return out


def oks_term(pred: torch.Tensor, target: torch.Tensor, labelled: torch.Tensor, area: torch.Tensor,
             sigmas: torch.Tensor) -> torch.Tensor:
    """The location term: predicted and target keypoints (P, K, >=2), ``labelled`` (P, K) bool, target box
    areas (P, 1), all in the same units; sigmas (K,)."""
    d = (pred[..., 0] - target[..., 0]).pow(2) + (pred[..., 1] - target[..., 1]).pow(2)
    factor = labelled.shape[1] / (labelled.sum(1) + 1e-9)
    e = d / ((2 * sigmas).pow(2) * (area + 1e-9) * 2)
    return (factor.view(-1, 1) * ((1 - torch.exp(-e)) * labelled)).mean()


def pad_keypoints(keypoints: Sequence[torch.Tensor], k: int, device: torch.device) -> torch.Tensor:
    """Per-image keypoints (n_i, K, 2 or 3) -> (B, M, K, 3) (x, y, visibility), a missing visibility 1,
    padding rows 0."""
    m = max((len(x) for x in keypoints), default=0)
    out = torch.zeros(len(keypoints), m, k, 3, device=device)
    for i, kp in enumerate(keypoints):
        n = len(kp)
        if not n:
            continue
        kp = kp.to(device=device, dtype=torch.float32)
        if kp.ndim != 3 or kp.shape[1] != k or kp.shape[2] not in (2, 3):
            raise DataError(f"image {i} of the batch has keypoints of shape {tuple(kp.shape)}; expected ({n}, {k}, 2 "
                            f"or 3): the model's kpt_shape and the data's must agree")
        out[i, :n, :, : kp.shape[2]] = kp
        if kp.shape[2] == 2:
            out[i, :n, :, 2] = 1.0
    return out


class PoseLoss(DetectionLoss):
    """The loss of a model whose last row is a ``Pose`` head.

    Args: those of :class:`~vision_attn.losses.DetectionLoss`, and ``sigmas`` (the data set's OKS sigmas,
    see the module), ``pose_gain``, ``kobj_gain``.

    Input: the head's training output ``{"feats": [maps], "kpts": (B, K*D, A)}``, and per image ``boxes``
    (n_i, 4) xyxy input pixels, ``labels`` (n_i,) and ``keypoints`` (n_i, K, 2 or 3): x, y in input
    pixels and the visibility (0: not labelled, 1 or 2: labelled).
    """

    batch_keys = ("boxes", "labels", "keypoints")

    def __init__(self, model: nn.Module, *, sigmas: Sequence[float] | torch.Tensor | None = None,
                 pose_gain: float = 12.0, kobj_gain: float = 1.0, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        head = self.head[0]
        self.kpt_shape = tuple(int(v) for v in head.kpt_shape)
        self.register_buffer("sigmas", keypoint_sigmas(self.kpt_shape, sigmas), persistent=False)
        self.pose_gain, self.kobj_gain = pose_gain, kobj_gain

    def decode_keypoints(self, kpts: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
        """Raw keypoints (B, K*D, A) -> (B, A, K, D) with x, y in grid units (the head's decoding)."""
        b, _, a = kpts.shape
        y = kpts.float().transpose(1, 2).reshape(b, a, *self.kpt_shape)
        xy = self.head[0].keypoint_offsets(y[..., :2]) + points.view(1, a, 1, 2)
        return torch.cat((xy, y[..., 2:]), -1)

    def matched_keypoints(self, assigned: Any, gt: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The positive anchors (B, A) bool and, per positive, its instance's keypoints (P, K, 3) in grid
        units, which are labelled (P, K) and the box's area (P, 1) in grid units; ``gt`` the padded
        keypoints (B, M, K, 3) in pixels (:func:`pad_keypoints`)."""
        targets = assigned.targets
        fg = targets.foreground
        gt_kpt = gt[fg.nonzero(as_tuple=True)[0], targets.gt_index[fg]].clone()  # (P, K, 3)
        stride = assigned.strides.view(1, -1).expand_as(fg)[fg].view(-1, 1, 1)
        gt_kpt[..., :2] = gt_kpt[..., :2] / stride
        box = targets.boxes[fg] / stride.view(-1, 1)
        area = ((box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1])).unsqueeze(1)
        return fg, gt_kpt, gt_kpt[..., 2] != 0, area

    def location_and_visibility(self, pred_kpt: torch.Tensor, gt_kpt: torch.Tensor, labelled: torch.Tensor,
                                area: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The (pose, kobj) terms of matched keypoints (P, K, D) and (P, K, 3), grid units."""
        pose = oks_term(pred_kpt, gt_kpt, labelled, area, self.sigmas.to(pred_kpt.device))
        kobj = (F.binary_cross_entropy_with_logits(pred_kpt[..., 2], labelled.float()) if pred_kpt.shape[-1] == 3
                else pred_kpt.sum() * 0)
        return pose, kobj

    def keypoint_terms(self, assigned: Any, kpts: torch.Tensor, gt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The (pose, kobj) terms of the positive anchors; ``gt`` the padded keypoints (B, M, K, 3) in pixels
        (:func:`pad_keypoints`)."""
        pred = self.decode_keypoints(kpts, assigned.points)
        if not bool(assigned.targets.foreground.any()):
            zero = pred.sum() * 0
            return zero, zero
        fg, gt_kpt, labelled, area = self.matched_keypoints(assigned, gt)
        return self.location_and_visibility(pred[fg], gt_kpt, labelled, area)

    def forward(self, preds: Mapping[str, Any], boxes: Sequence[torch.Tensor],  # type: ignore[override]
                labels: Sequence[torch.Tensor], keypoints: Sequence[torch.Tensor]) -> PoseParts:
        if not isinstance(preds, Mapping) or not {"feats", "kpts"} <= set(preds):
            raise ConfigError("the keypoint loss needs a Pose head's training output (feats, kpts); this model's "
                              "head is not a Pose head")
        if len(keypoints) != len(boxes):
            raise DataError(f"the loss got {len(boxes)} box lists but {len(keypoints)} keypoint lists")
        for i, (kp, b) in enumerate(zip(keypoints, boxes)):
            if len(kp) != len(b):
                raise DataError(f"image {i} of the batch has {len(b)} boxes but {len(kp)} keypoint sets; each box "
                                "needs its keypoints")
        gt = pad_keypoints(keypoints, self.kpt_shape[0], preds["kpts"].device)  # (B, M, K, 3) pixels
        assigned = self.assign(preds["feats"], boxes, labels)
        box, cls, dfl = self.detection_terms(assigned)
        pose, kobj = self.keypoint_terms(assigned, preds["kpts"], gt)
        g_box, g_cls, g_dfl = self.gains
        total = g_box * box + self.pose_gain * pose + self.kobj_gain * kobj + g_cls * cls + g_dfl * dfl
        return PoseParts(total, box.detach(), pose.detach(), kobj.detach(), cls.detach(), dfl.detach())
