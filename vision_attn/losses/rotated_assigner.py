"""Task-aligned assignment for rotated boxes (ultralytics' ``RotatedTaskAlignedAssigner``).

The rule of :class:`~vision_attn.losses.assigner.TaskAlignedAssigner` with two changes: a candidate
anchor is one whose point lies inside (or on the edge of) the rotated box, the box's sides below
``min_side`` first widened to it; and the overlap of a box with a prediction is their ProbIoU
(:func:`~vision_attn.models.yolo.rotated.probiou`). Boxes are ``(cx, cy, w, h, angle)``.
"""
from __future__ import annotations

import torch

from vision_attn.losses.assigner import TaskAlignedAssigner
from vision_attn.models.yolo.rotated import box_corners, probiou

__all__ = ["RotatedTaskAlignedAssigner", "points_in_rotated"]


def points_in_rotated(points: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Points (A, 2) and rotated boxes (B, M, 5) -> (B, M, A) bool: the point lies inside or on the box."""
    corners = box_corners(boxes)  # (B, M, 4, 2)
    origin, ab, ad = corners[..., 0, :], corners[..., 1, :] - corners[..., 0, :], corners[..., 3, :] - corners[..., 0, :]
    ap = points.view(1, 1, -1, 2) - origin.unsqueeze(2)  # (B, M, A, 2)
    along_ab, along_ad = (ap * ab.unsqueeze(2)).sum(-1), (ap * ad.unsqueeze(2)).sum(-1)
    norm_ab, norm_ad = (ab * ab).sum(-1, keepdim=True), (ad * ad).sum(-1, keepdim=True)
    return (along_ab >= 0) & (along_ab <= norm_ab) & (along_ad >= 0) & (along_ad <= norm_ad)


class RotatedTaskAlignedAssigner(TaskAlignedAssigner):
    """:class:`TaskAlignedAssigner` on rotated boxes (B, M, 5) and predictions (B, A, 5), the boxes and
    points in the same units (pixels); ``min_side`` as there (the second level's stride)."""

    def candidates(self, points: torch.Tensor, gt_boxes: torch.Tensor, gt_mask: torch.Tensor,
                   **extra: torch.Tensor) -> torch.Tensor:
        wh = gt_boxes[..., 2:4]
        small = (wh < self.min_side) & gt_mask.unsqueeze(-1)
        widened = torch.cat((gt_boxes[..., :2], torch.where(small, torch.full_like(wh, self.min_side), wh),
                             gt_boxes[..., 4:]), -1)
        return points_in_rotated(points, widened)

    def overlaps(self, gt_boxes: torch.Tensor, pred_boxes: torch.Tensor) -> torch.Tensor:
        return probiou(gt_boxes, pred_boxes)
