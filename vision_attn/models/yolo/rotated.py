"""Rotated-box geometry on tensors: corners, ProbIoU (the training overlap and the NMS overlap), one form
per rectangle, distances to a rotated box's sides, and rotated NMS. (The exact polygon IoU, for metrics, is
:func:`vision_attn.evaluation.rotated_iou`.)

A rotated box is ``(cx, cy, w, h, angle)`` (``xywhr``), the angle in radians, ``w`` along the direction
``(cos a, sin a)``.

- :func:`probiou`: the probabilistic IoU of Llerena et al. (2021): each box as a 2-d Gaussian (covariance
  ``R diag(w^2, h^2) R^T / 12``), ``1 - Hellinger distance`` from their Bhattacharyya distance; smooth
  and cheap, what the oriented-box loss and its assigner use (ultralytics' ``probiou``).
- :func:`rotated_nms`: non-maximum suppression on ProbIoU, Fast-NMS (ultralytics') or greedy.
"""
from __future__ import annotations

import math

import torch

__all__ = ["box_corners", "covariance", "regularize", "pairwise_probiou", "probiou", "rotated_nms",
           "rotated_to_dist"]


def box_corners(boxes: torch.Tensor) -> torch.Tensor:
    """Rotated boxes (..., 5) -> their corners (..., 4, 2), in order around the box."""
    ctr, w, h, a = boxes[..., :2], boxes[..., 2:3], boxes[..., 3:4], boxes[..., 4:5]
    cos, sin = torch.cos(a), torch.sin(a)
    vw = torch.cat((w / 2 * cos, w / 2 * sin), -1)  # half of the w side, (..., 2)
    vh = torch.cat((-h / 2 * sin, h / 2 * cos), -1)
    return torch.stack((ctr + vw + vh, ctr + vw - vh, ctr - vw - vh, ctr - vw + vh), -2)


def regularize(boxes: torch.Tensor) -> torch.Tensor:
    """Rotated boxes (..., 5) -> the same rectangles with the angle in [0, pi/2) (w and h swapped where the
    angle, modulo pi, is pi/2 or more): one form per rectangle, as ultralytics reports them."""
    w, h, a = boxes[..., 2], boxes[..., 3], boxes[..., 4]
    swap = a % math.pi >= math.pi / 2
    return torch.stack((boxes[..., 0], boxes[..., 1], torch.where(swap, h, w), torch.where(swap, w, h),
                        a % (math.pi / 2)), -1)


def covariance(boxes: torch.Tensor, floor: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rotated boxes (..., 5) -> the Gaussian's covariance ``[[a, c], [c, b]]`` as (a, b, c), each (...):
    variances ``w^2 / 12 + floor`` and ``h^2 / 12 + floor`` rotated by the angle (``floor`` bounds the
    gradients of boxes smaller than a cell)."""
    vw, vh = boxes[..., 2].pow(2) / 12 + floor, boxes[..., 3].pow(2) / 12 + floor
    cos, sin = torch.cos(boxes[..., 4]), torch.sin(boxes[..., 4])
    return vw * cos.pow(2) + vh * sin.pow(2), vw * sin.pow(2) + vh * cos.pow(2), (vw - vh) * cos * sin


def probiou(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-7, floor: float = 0.0) -> torch.Tensor:
    """ProbIoU of matching rotated boxes (..., 5) and (..., 5) (broadcast) -> (...), in [0, 1]."""
    x1, y1, x2, y2 = a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    a1, b1, c1 = covariance(a, floor)
    a2, b2, c2 = covariance(b, floor)
    sa, sb, sc = a1 + a2, b1 + b2, c1 + c2
    det = sa * sb - sc.pow(2)
    t1 = (sa * (y1 - y2).pow(2) + sb * (x1 - x2).pow(2)) / (det + eps) * 0.25
    t2 = (sc * (x2 - x1) * (y1 - y2)) / (det + eps) * 0.5
    t3 = (det / (4 * ((a1 * b1 - c1.pow(2)).clamp(min=0) * (a2 * b2 - c2.pow(2)).clamp(min=0)).sqrt() + eps)
          + eps).log() * 0.5
    bhattacharyya = (t1 + t2 + t3).clamp(eps, 100.0)
    return 1 - (1.0 - (-bhattacharyya).exp() + eps).sqrt()


def pairwise_probiou(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """ProbIoU of every pair of rotated boxes (N, 5) and (M, 5) -> (N, M)."""
    return probiou(a.unsqueeze(1), b.unsqueeze(0), eps)


def rotated_nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, *, method: str = "fast"
                ) -> torch.Tensor:
    """NMS of rotated boxes (N, 5) with ``scores`` (N,) on their ProbIoU: the indices kept, highest score
    first. ``method`` ``"fast"`` (Fast-NMS, what ultralytics' rotated prediction does): a box is dropped when
    it overlaps any higher-scoring box by more than ``iou_threshold``, kept or not; ``"greedy"``: only when it
    overlaps a kept one."""
    if method not in ("greedy", "fast"):
        raise ValueError(f"method={method!r}: choose 'fast' or 'greedy'")
    order = scores.argsort(descending=True)
    if order.numel() == 0:
        return order
    sorted_boxes = boxes[order].float()
    over = (pairwise_probiou(sorted_boxes, sorted_boxes) > iou_threshold).triu(1)  # over[i, j]: i suppresses j
    if method == "fast":
        return order[~over.any(0)]
    over = over.cpu()
    removed = torch.zeros(order.numel(), dtype=torch.bool)
    keep = []
    for i in range(order.numel()):
        if removed[i]:
            continue
        keep.append(i)
        removed |= over[i]
    return order[torch.tensor(keep, dtype=torch.long, device=order.device)]


def rotated_to_dist(boxes: torch.Tensor, points: torch.Tensor, max_dist: float | None = None) -> torch.Tensor:
    """Rotated boxes (..., A, 5) -> distances (..., A, 4) (left, top, right, bottom, in the box's own frame)
    from points (A, 2); with ``max_dist`` clamped to [0, max_dist - 0.01] (as
    :func:`~vision_attn.losses.boxes.box_to_dist`)."""
    offset = boxes[..., :2] - points  # the centre from the point
    cos, sin = torch.cos(boxes[..., 4:5]), torch.sin(boxes[..., 4:5])
    along = offset[..., :1] * cos + offset[..., 1:2] * sin
    across = -offset[..., :1] * sin + offset[..., 1:2] * cos
    half_w, half_h = boxes[..., 2:3] / 2, boxes[..., 3:4] / 2
    dist = torch.cat((half_w - along, half_h - across, half_w + along, half_h + across), -1)
    return dist if max_dist is None else dist.clamp(0, max_dist - 0.01)
