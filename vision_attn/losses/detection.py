"""The YOLOv8 detection loss: task-aligned assignment, BCE on classes, CIoU and distribution focal loss
on the boxes of the positive anchors, weighted ``box 7.5, cls 0.5, dfl 1.5``.

A head without distributions (``reg_max`` 1, YOLO26) predicts the four distances directly: the DFL term
is then an L1 distance between predicted and target distances, in pixels divided by the input's width
(left, right) and height (top, bottom), under the same gain (ultralytics' ``BboxLoss`` for ``reg_max`` 1).

Input: the Detect head's training output (a list of (B, 4*reg_max + nc, H_i, W_i) maps) and the
ground truth as per-image lists (``boxes`` (n_i, 4) xyxy in input pixels, ``labels`` (n_i,) int64),
padded here to the largest count of the batch. All losses are normalised by the sum of the class
targets, so the returned total is per image, not summed over the batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import DataError
from vision_attn.losses.assigner import Assignment, TaskAlignedAssigner
from vision_attn.losses.batch import BatchLoss
from vision_attn.losses.boxes import box_to_dist, ciou, dist_to_box
from vision_attn.losses.dfl import distribution_focal_loss
from vision_attn.models.yolo.detect import make_anchors

__all__ = ["Assigned", "DetectionLoss", "LossParts", "pad_targets"]


@dataclass
class LossParts:
    """``total`` = box_gain * box + cls_gain * cls + dfl_gain * dfl (with gradients); the parts detached.
    ``dfl`` is the distribution focal loss, or the L1 distance term of a ``reg_max`` 1 head."""

    total: torch.Tensor
    box: torch.Tensor
    cls: torch.Tensor
    dfl: torch.Tensor


@dataclass
class Assigned:
    """One batch decoded and assigned: the flat maps (B, 4*reg_max + nc, A), class logits (B, A, nc),
    distance logits (B, A, 4, reg_max) and distances (B, A, 4), predicted boxes (B, A, 4) xyxy in grid
    units, anchor points (A, 2) and strides (A, 1), the :class:`Assignment`, the sum of the class
    targets (the normaliser, >= 1) and the input's (H, W) in pixels."""

    flat: torch.Tensor
    pred_logits: torch.Tensor
    dist_logits: torch.Tensor
    dist: torch.Tensor
    pred_boxes: torch.Tensor
    points: torch.Tensor
    strides: torch.Tensor
    targets: Assignment
    score_sum: torch.Tensor
    input_size: tuple[float, float]


def pad_targets(boxes: Sequence[torch.Tensor], labels: Sequence[torch.Tensor], device: torch.device, width: int = 4
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-image boxes (n_i, width) (4: xyxy; 5: a rotated box) and labels (n_i,) -> padded boxes
    (B, M, width), labels (B, M), mask (B, M) with M the largest n_i."""
    b = len(boxes)
    m = max((len(x) for x in boxes), default=0)
    out_boxes = torch.zeros(b, m, width, device=device)
    out_labels = torch.zeros(b, m, dtype=torch.long, device=device)
    mask = torch.zeros(b, m, dtype=torch.bool, device=device)
    for i, (bx, lb) in enumerate(zip(boxes, labels)):  # one copy per image, not per box
        n = len(bx)
        if n:
            out_boxes[i, :n] = bx.to(device=device, dtype=torch.float32).view(n, width)
            out_labels[i, :n] = lb.to(device=device, dtype=torch.long).view(n)
            mask[i, :n] = True
    return out_boxes, out_labels, mask


class DetectionLoss(BatchLoss, nn.Module):
    """YOLOv8's loss for a detector whose last row is a ``Detect`` head.

    Args:
        model: a :class:`~vision_attn.models.yolo.DetectionModel` (its head gives nc, reg_max, strides).
        box_gain, cls_gain, dfl_gain: weights of the CIoU, BCE and DFL terms.
        topk, topk2, alpha, beta: the assigner's (see :class:`TaskAlignedAssigner`); boxes smaller than the
            second level's stride look for candidate anchors in a box of that size, as in YOLOv8.
    """

    sum_over_images: ClassVar[bool] = True
    """The result is a mean per image that YOLOv8's trainer multiplies by the batch size."""

    def __init__(self, model: nn.Module, *, box_gain: float = 7.5, cls_gain: float = 0.5, dfl_gain: float = 1.5,
                 topk: int = 10, topk2: int | None = None, alpha: float = 0.5, beta: float = 6.0) -> None:
        super().__init__()
        head = model.model[-1] if hasattr(model, "model") else model
        self.nc, self.reg_max = int(head.nc), int(head.reg_max)
        self.head = [head]  # not a submodule: the loss owns no parameters and is not saved
        self.gains = (box_gain, cls_gain, dfl_gain)
        strides = [float(s) for s in head.stride]
        min_side = strides[1] if len(strides) > 1 else (strides[0] if strides else 0.0)
        self.assigner = TaskAlignedAssigner(topk=topk, topk2=topk2, alpha=alpha, beta=beta, min_side=min_side)
        self.register_buffer("bins", torch.arange(self.reg_max, dtype=torch.float32), persistent=False)

    def flatten(self, feats: Sequence[torch.Tensor]
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The raw maps -> flat maps (B, 4*reg_max + nc, A), class logits (B, A, nc), distance logits
        (B, A, 4, reg_max), distances (B, A, 4) in grid units, anchor points (A, 2) and strides (A, 1)."""
        head = self.head[0]
        b = feats[0].shape[0]
        flat = torch.cat([f.reshape(b, self.reg_max * 4 + self.nc, -1) for f in feats], 2).float()
        pred_dist, pred_logits = flat.transpose(1, 2).split((4 * self.reg_max, self.nc), 2)  # (B, A, .)
        points, strides = make_anchors(feats, head.stride)  # grid units (A, 2), (A, 1)
        points, strides = points.float(), strides.float()
        dist_logits = pred_dist.reshape(b, points.shape[0], 4, self.reg_max)
        dist = dist_logits.softmax(-1) @ self.bins.to(flat.device) if self.reg_max > 1 else pred_dist
        return flat, pred_logits, dist_logits, dist, points, strides

    def check_targets(self, b: int, boxes: Sequence[torch.Tensor], labels: Sequence[torch.Tensor]) -> None:
        if len(boxes) != b or len(labels) != b:
            raise DataError(f"the loss got {b} images but {len(boxes)} box lists and {len(labels)} label lists")

    def check_labels(self, gt_labels: torch.Tensor, gt_mask: torch.Tensor) -> None:
        if gt_mask.any() and int(gt_labels[gt_mask].max()) >= self.nc:
            bad = int(gt_labels[gt_mask].max())
            raise DataError(f"a target has class index {bad} but the detector has {self.nc} classes; check the "
                            f"data's names against the model's num_classes")

    def assign(self, feats: Sequence[torch.Tensor], boxes: Sequence[torch.Tensor],
               labels: Sequence[torch.Tensor], **extra: torch.Tensor) -> Assigned:
        """Decode the raw maps and assign their anchors to the ground truth (what every term reads);
        ``extra`` goes to the assigner."""
        self.check_targets(feats[0].shape[0], boxes, labels)
        flat, pred_logits, dist_logits, dist, points, strides = self.flatten(feats)
        pred_boxes = dist_to_box(dist, points)  # grid units
        gt_boxes, gt_labels, gt_mask = pad_targets(boxes, labels, flat.device)
        self.check_labels(gt_labels, gt_mask)
        targets = self.assigner(pred_logits.detach().sigmoid(), pred_boxes.detach() * strides, points * strides,
                                gt_labels, gt_boxes, gt_mask, **extra)
        return Assigned(flat, pred_logits, dist_logits, dist, pred_boxes, points, strides, targets,
                        targets.scores.sum().clamp(min=1), self.input_size(feats))

    def input_size(self, feats: Sequence[torch.Tensor]) -> tuple[float, float]:
        """The network input's (H, W) in pixels, from the finest map."""
        h, w = (s * float(self.head[0].stride[0]) for s in feats[0].shape[-2:])
        return h, w

    def grid_boxes(self, boxes: torch.Tensor, strides: torch.Tensor) -> torch.Tensor:
        """Target boxes (B, A, 4) in pixels -> grid units."""
        return boxes / strides

    def box_overlap(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The overlap the box term maximises, of matching boxes: CIoU."""
        return ciou(pred, target)

    def target_distances(self, points: torch.Tensor, boxes: torch.Tensor, max_dist: float | None = None
                         ) -> torch.Tensor:
        """The distances from the anchor points to the sides of the target boxes (grid units)."""
        return box_to_dist(points, boxes, max_dist)

    def detection_terms(self, a: Assigned) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The (box, cls, dfl) terms, each normalised by the sum of the class targets, unweighted."""
        targets, score_sum = a.targets, a.score_sum
        cls = F.binary_cross_entropy_with_logits(a.pred_logits, targets.scores, reduction="sum") / score_sum
        fg = targets.foreground
        if bool(fg.any()):
            weight = targets.scores.sum(-1)[fg]  # (P,)
            target_boxes = self.grid_boxes(targets.boxes, a.strides)
            box = ((1 - self.box_overlap(a.pred_boxes[fg], target_boxes[fg])) * weight).sum() / score_sum
            if self.reg_max > 1:
                target_dist = self.target_distances(a.points, target_boxes, self.reg_max - 1)[fg]  # (P, 4)
                dfl = (distribution_focal_loss(a.dist_logits[fg], target_dist) * weight).sum() / score_sum
            else:  # L1 on the distances in pixels over the input's (W, H, W, H)
                h, w = a.input_size
                scale = a.strides / a.flat.new_tensor([w, h, w, h])  # (A, 4)
                target_dist = self.target_distances(a.points, target_boxes) * scale
                l1 = (a.dist * scale - target_dist).abs()[fg].mean(-1)
                dfl = (l1 * weight).sum() / score_sum
        else:  # no object in the batch: the box terms are 0 but keep the graph
            box = dfl = a.flat.sum() * 0
        return box, cls, dfl

    def forward(self, feats: Sequence[torch.Tensor], boxes: Sequence[torch.Tensor],
                labels: Sequence[torch.Tensor]) -> LossParts:
        """Raw maps of the head, per-image ground truth -> the loss and its parts."""
        box, cls, dfl = self.detection_terms(self.assign(feats, boxes, labels))
        g_box, g_cls, g_dfl = self.gains
        total = g_box * box + g_cls * cls + g_dfl * dfl
        return LossParts(total, box.detach(), cls.detach(), dfl.detach())
