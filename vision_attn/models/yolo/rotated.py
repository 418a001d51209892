"""Rotated-box geometry: corners, ProbIoU (the training overlap), the exact polygon IoU (metrics and NMS),
distances to and from a rotated box, and rotated NMS.

A rotated box is ``(cx, cy, w, h, angle)`` (``xywhr``), the angle in radians, ``w`` along the direction
``(cos a, sin a)``.

- :func:`probiou`: the probabilistic IoU of Llerena et al. (2021): each box as a 2-d Gaussian (covariance
  ``R diag(w^2, h^2) R^T / 12``), ``1 - Hellinger distance`` from their Bhattacharyya distance; smooth
  and cheap, what the oriented-box loss and its assigner use (ultralytics' ``probiou``).
- :func:`rotated_iou`: the exact IoU of the two rectangles as polygons: the intersection is the convex
  polygon of the corners of each box inside the other and the crossings of their edges, ordered by angle
  about their centroid, its area by the shoelace formula.
- :func:`rotated_nms`: greedy non-maximum suppression with either overlap.
"""
from __future__ import annotations

import math

import torch

__all__ = ["box_corners", "covariance", "regularize", "pairwise_probiou", "probiou", "rotated_iou",
           "rotated_nms", "rotated_to_dist"]


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


def _cross(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]


def _inside(points: torch.Tensor, corners: torch.Tensor, tol: float) -> torch.Tensor:
    """Points (..., P, 2) inside (or on) the rectangles (..., 4, 2) -> (..., P) bool."""
    origin, ab, ad = corners[..., 0:1, :], corners[..., 1:2, :] - corners[..., 0:1, :], \
        corners[..., 3:4, :] - corners[..., 0:1, :]
    ap = points - origin
    u = (ap * ab).sum(-1) / (ab * ab).sum(-1).clamp(min=1e-30)
    v = (ap * ad).sum(-1) / (ad * ad).sum(-1).clamp(min=1e-30)
    return (u >= -tol) & (u <= 1 + tol) & (v >= -tol) & (v <= 1 + tol)


def _intersection_area(ca: torch.Tensor, cb: torch.Tensor, tol: float = 1e-9) -> torch.Tensor:
    """Corners (..., 4, 2) of two sets of rectangles (broadcast) -> the area of each intersection (...)."""
    ca, cb = torch.broadcast_tensors(ca, cb)
    ea, eb = ca.roll(-1, -2) - ca, cb.roll(-1, -2) - cb  # edge vectors (..., 4, 2)
    p, r = ca.unsqueeze(-2), ea.unsqueeze(-2)  # (..., 4, 1, 2): edges of a
    q, s = cb.unsqueeze(-3), eb.unsqueeze(-3)  # (..., 1, 4, 2): edges of b
    denom = _cross(r, s)
    qp = q - p
    parallel = denom.abs() < 1e-12
    safe = torch.where(parallel, torch.ones_like(denom), denom)
    t, u = _cross(qp, s) / safe, _cross(qp, r) / safe
    crossing = ~parallel & (t >= -tol) & (t <= 1 + tol) & (u >= -tol) & (u <= 1 + tol)
    hits = (p + t.unsqueeze(-1) * r).flatten(-3, -2)  # (..., 16, 2)
    points = torch.cat((ca, cb, hits), -2)  # (..., 24, 2)
    valid = torch.cat((_inside(ca, cb, tol), _inside(cb, ca, tol), crossing.flatten(-2)), -1)  # (..., 24)
    n = valid.sum(-1, keepdim=True)
    centre = (points * valid.unsqueeze(-1)).sum(-2) / n.clamp(min=1)  # (..., 2)
    rel = points - centre.unsqueeze(-2)
    angle = torch.atan2(rel[..., 1], rel[..., 0]).masked_fill(~valid, 10.0)  # invalid points sort last
    order = angle.argsort(-1)
    rel = rel.gather(-2, order.unsqueeze(-1).expand_as(rel))
    valid = valid.gather(-1, order)
    rel = torch.where(valid.unsqueeze(-1), rel, rel[..., :1, :])  # the unused slots repeat the first point
    area = _cross(rel, rel.roll(-1, -2)).sum(-1).abs() / 2
    return torch.where(n.squeeze(-1) >= 3, area, torch.zeros_like(area))


def rotated_iou(a: torch.Tensor, b: torch.Tensor, *, pairwise: bool = True, chunk: int = 256) -> torch.Tensor:
    """The exact IoU of rotated boxes as polygons: (N, 5) and (M, 5) -> (N, M) (``pairwise``), or
    matching (..., 5) and (..., 5) -> (...). Computed in float64 (rows ``chunk`` at a time), returned in
    ``a``'s dtype."""
    dtype = a.dtype
    a64, b64 = a.double(), b.double()
    area_a, area_b = a64[..., 2] * a64[..., 3], b64[..., 2] * b64[..., 3]
    if not pairwise:
        inter = _intersection_area(box_corners(a64), box_corners(b64))
        return (inter / (area_a + area_b - inter).clamp(min=1e-12)).to(dtype)
    cb = box_corners(b64).unsqueeze(0)  # (1, M, 4, 2)
    rows = []
    for start in range(0, a64.shape[0], chunk):
        ca = box_corners(a64[start:start + chunk]).unsqueeze(1)  # (n, 1, 4, 2)
        inter = _intersection_area(ca, cb)
        union = area_a[start:start + chunk, None] + area_b[None] - inter
        rows.append(inter / union.clamp(min=1e-12))
    out = torch.cat(rows) if rows else a64.new_zeros((0, b64.shape[0]))
    return out.to(dtype)


def rotated_nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, *, overlap: str = "iou",
                method: str = "greedy") -> torch.Tensor:
    """NMS of rotated boxes (N, 5) with ``scores`` (N,): the indices kept, highest score first. ``overlap``
    ``"iou"`` (exact polygon IoU) or ``"probiou"``. ``method`` ``"greedy"``: a box is dropped when it
    overlaps a kept, higher-scoring box by more than ``iou_threshold``; ``"fast"`` (Fast-NMS, what
    ultralytics' rotated prediction does): when it overlaps any higher-scoring box that much, kept or not."""
    if overlap not in ("iou", "probiou") or method not in ("greedy", "fast"):
        raise ValueError(f"overlap={overlap!r}, method={method!r}: choose overlap 'iou' or 'probiou', method "
                         "'greedy' or 'fast'")
    order = scores.argsort(descending=True)
    if order.numel() == 0:
        return order
    sorted_boxes = boxes[order]
    ious = (rotated_iou(sorted_boxes, sorted_boxes) if overlap == "iou"
            else pairwise_probiou(sorted_boxes.float(), sorted_boxes.float()))
    over = (ious > iou_threshold).triu(1)  # over[i, j]: the better box i would suppress box j
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
