"""Box geometry for the detection loss: distances <-> boxes around anchor points, element-wise CIoU.

Boxes are ``(x1, y1, x2, y2)``; distances are ``(left, top, right, bottom)`` from an anchor point.
"""
from __future__ import annotations

import torch
from torchvision.ops import complete_box_iou_loss

__all__ = ["dist_to_box", "box_to_dist", "ciou"]


def dist_to_box(dist: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Distances (..., A, 4) from points (A, 2) -> boxes (..., A, 4) xyxy in the points' units."""
    lt, rb = dist.chunk(2, -1)
    return torch.cat((points - lt, points + rb), -1)


def box_to_dist(points: torch.Tensor, boxes: torch.Tensor, max_dist: float | None = None) -> torch.Tensor:
    """Boxes (..., A, 4) xyxy -> distances (..., A, 4) from points (A, 2); with ``max_dist`` clamped to
    [0, max_dist - 0.01] (the largest value the distribution over ``max_dist + 1`` bins can split between
    two bins), without it as they are (negative for a point outside the box)."""
    x1y1, x2y2 = boxes.chunk(2, -1)
    dist = torch.cat((points - x1y1, x2y2 - points), -1)
    return dist if max_dist is None else dist.clamp_(0, max_dist - 0.01)


def ciou(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """Complete IoU of matching boxes (..., 4) and (..., 4) xyxy -> (...): IoU minus the centre-distance
    and aspect-ratio penalties, in [-1.5, 1] (``1 - torchvision.ops.complete_box_iou_loss``)."""
    shape = torch.broadcast_shapes(a.shape, b.shape)
    a, b = a.expand(shape).reshape(-1, 4), b.expand(shape).reshape(-1, 4)
    return (1 - complete_box_iou_loss(a, b, reduction="none", eps=eps)).view(shape[:-1])
