"""The oriented-box loss (ultralytics' ``v8OBBLoss``): the detection loss on rotated boxes plus an angle term.

Each anchor's rotated box comes from its four distances (measured in the box's own frame) and the head's
angle (:func:`~vision_attn.models.yolo.obb.rotated_centres`). Anchors are assigned by
:class:`~vision_attn.losses.rotated_assigner.RotatedTaskAlignedAssigner`; the box term is ``1 - ProbIoU``
(covariances floored by 0.01 grid units squared), the distance term DFL (or, for a ``reg_max`` 1 head, the
L1 term of :class:`~vision_attn.losses.DetectionLoss`) towards the distances to the target's sides in its
frame, and the angle term ``sin^2(2 * (angle - target angle))`` (the difference wrapped to half a turn),
weighted by ``exp(-log(w / h)^2 / 9)`` so that nearly square boxes, whose angle is ambiguous, count less.
Targets narrower than 2 px on either side are left out, as ultralytics does.

``total = box_gain * box + cls_gain * cls + dfl_gain * dfl + angle_gain * angle`` (7.5, 0.5, 1.5, 1.0), per
image like :class:`~vision_attn.losses.DetectionLoss`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.losses.detection import Assigned, DetectionLoss, pad_targets
from vision_attn.models.yolo.rotated import probiou, rotated_to_dist
from vision_attn.losses.rotated_assigner import RotatedTaskAlignedAssigner
from vision_attn.models.yolo.obb import rotated_centres

__all__ = ["OBBLoss", "OBBParts"]

MIN_SIDE_PX = 2.0
"""Targets with a side below this many pixels are left out of the loss."""


@dataclass
class OBBParts:
    """``total`` (with gradients) and the unweighted parts (detached): ``box`` (1 - ProbIoU), ``cls`` (BCE),
    ``dfl`` (distribution focal loss, or the L1 distance term of a ``reg_max`` 1 head), ``angle``."""

    total: torch.Tensor
    box: torch.Tensor
    cls: torch.Tensor
    dfl: torch.Tensor
    angle: torch.Tensor


class OBBLoss(DetectionLoss):
    """The loss of a model whose last row is an ``OBB`` head.

    Args: those of :class:`~vision_attn.losses.DetectionLoss`, and ``angle_gain``.

    Input: the head's training output ``{"feats": [maps], "angle": (B, 1, A)}`` (radians), and per image
    ``rboxes`` (n_i, 5): (cx, cy, w, h, angle) in input pixels and radians, and ``labels`` (n_i,).
    """

    batch_keys = ("rboxes", "labels")
    box_floor = 0.01
    """Added to each Gaussian's variances in the box term (grid units squared): bounded gradients for
    boxes smaller than a cell."""

    def __init__(self, model: nn.Module, *, angle_gain: float = 1.0, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.angle_gain = angle_gain
        a = self.assigner
        self.assigner = RotatedTaskAlignedAssigner(topk=a.topk, topk2=a.topk2, alpha=a.alpha, beta=a.beta,
                                                   min_side=a.min_side)

    def assign_rotated(self, feats: Sequence[torch.Tensor], angle: torch.Tensor, rboxes: Sequence[torch.Tensor],
                       labels: Sequence[torch.Tensor]) -> Assigned:
        """Decode the raw maps and angles (B, 1, A) into rotated boxes (B, A, 5) (grid units, radians) and
        assign their anchors to the targets."""
        self.check_targets(feats[0].shape[0], rboxes, labels)
        flat, pred_logits, dist_logits, dist, points, strides = self.flatten(feats)
        theta = angle.float().transpose(1, 2)  # (B, A, 1)
        centres = rotated_centres(dist.transpose(1, 2), theta.transpose(1, 2), points.T.unsqueeze(0))
        pred_boxes = torch.cat((centres.transpose(1, 2), theta), -1)  # (B, A, 5)
        kept = [(b.view(-1, 5)[:, 2:4] >= MIN_SIDE_PX).all(-1) for b in rboxes]
        gt_boxes, gt_labels, gt_mask = pad_targets([b.view(-1, 5)[k] for b, k in zip(rboxes, kept)],
                                                   [lb.view(-1)[k] for lb, k in zip(labels, kept)], flat.device, 5)
        self.check_labels(gt_labels, gt_mask)
        scaled = pred_boxes.detach().clone()
        scaled[..., :4] *= strides
        targets = self.assigner(pred_logits.detach().sigmoid(), scaled, points * strides, gt_labels, gt_boxes, gt_mask)
        return Assigned(flat, pred_logits, dist_logits, dist, pred_boxes, points, strides, targets,
                        targets.scores.sum().clamp(min=1), self.input_size(feats))

    def grid_boxes(self, boxes: torch.Tensor, strides: torch.Tensor) -> torch.Tensor:
        return torch.cat((boxes[..., :4] / strides, boxes[..., 4:]), -1)

    def box_overlap(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return probiou(pred, target, floor=self.box_floor)

    def target_distances(self, points: torch.Tensor, boxes: torch.Tensor, max_dist: float | None = None
                         ) -> torch.Tensor:
        return rotated_to_dist(boxes, points, max_dist)

    def angle_term(self, a: Assigned) -> torch.Tensor:
        """The angle term of the positive anchors, normalised by the sum of the class targets."""
        fg = a.targets.foreground
        if not bool(fg.any()):
            return a.pred_boxes[..., 4].sum() * 0
        target = self.grid_boxes(a.targets.boxes, a.strides)[fg]
        log_ratio = torch.log((target[:, 2] + 1e-9) / (target[:, 3] + 1e-9))
        delta = a.pred_boxes[fg][:, 4] - target[:, 4]
        wrapped = delta - torch.round(delta / math.pi) * math.pi
        weight = a.targets.scores.sum(-1)[fg]
        return (torch.exp(-log_ratio.pow(2) / 9) * torch.sin(2 * wrapped).pow(2) * weight).sum() / a.score_sum

    def forward(self, preds: Mapping[str, Any], rboxes: Sequence[torch.Tensor],  # type: ignore[override]
                labels: Sequence[torch.Tensor]) -> OBBParts:
        if not isinstance(preds, Mapping) or not {"feats", "angle"} <= set(preds):
            raise ConfigError("the oriented-box loss needs an OBB head's training output (feats, angle); this "
                              "model's head is not an OBB head")
        assigned = self.assign_rotated(preds["feats"], preds["angle"], rboxes, labels)
        box, cls, dfl = self.detection_terms(assigned)
        angle = self.angle_term(assigned)
        g_box, g_cls, g_dfl = self.gains
        total = g_box * box + g_cls * cls + g_dfl * dfl + self.angle_gain * angle
        return OBBParts(total, box.detach(), cls.detach(), dfl.detach(), angle.detach())
