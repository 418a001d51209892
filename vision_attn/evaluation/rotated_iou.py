"""The IoU of oriented boxes, exactly: the area of the two rectangles' intersection polygon.

:func:`rotated_iou` cuts each box of ``a`` by the four edges of each box of ``b`` (Sutherland-Hodgman
on convex polygons, every pair at once in NumPy, float64) and measures the polygon left with the
shoelace formula. Boxes are ``cx, cy, w, h, r`` (r in radians, any range; corners as
:func:`vision_attn.data.rotated.xywhr_to_corners`). What ultralytics' OBB validator computes with
``probiou`` is an approximation (a Gaussian overlap); this is the polygon's.
"""
from __future__ import annotations

import numpy as np

from vision_attn.data.rotated import xywhr_to_corners

__all__ = ["rotated_iou", "convex_intersection_area"]

_MAX = 8  # a convex quadrilateral cut by another one keeps at most 8 vertices


def convex_intersection_area(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Areas (P,) of the intersections of convex quadrilaterals ``p`` (P, 4, 2) and ``q`` (P, 4, 2), pairwise."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    n = len(p)
    poly = np.zeros((n, _MAX, 2))
    poly[:, :4] = p
    count = np.full(n, 4)
    k = np.arange(_MAX)
    rows = np.arange(n)[:, None]
    qx, qy = q[..., 0], q[..., 1]
    orient = np.sign(0.5 * (qx * np.roll(qy, -1, 1) - np.roll(qx, -1, 1) * qy).sum(1))[:, None]  # +1: y-up CCW
    for e in range(4):
        e0, e1 = q[:, e], q[:, (e + 1) % 4]
        d = (e1 - e0)[:, None]
        side = orient * (d[..., 0] * (poly[..., 1] - e0[:, None, 1]) - d[..., 1] * (poly[..., 0] - e0[:, None, 0]))
        valid = k[None] < count[:, None]
        prev = (k[None] - 1) % np.maximum(count, 1)[:, None]
        prev_pts, prev_side = poly[rows, prev], side[rows, prev]
        inside, prev_inside = side >= 0, prev_side >= 0
        denom = prev_side - side
        t = np.where(denom != 0, prev_side / np.where(denom != 0, denom, 1), 0)[..., None]
        crossing = prev_pts + t * (poly - prev_pts)
        cand = np.stack([crossing, poly], axis=2).reshape(n, 2 * _MAX, 2)  # per vertex: crossing, then itself
        keep = np.stack([valid & (inside != prev_inside), valid & inside], axis=2).reshape(n, 2 * _MAX)
        pos = np.cumsum(keep, axis=1) - 1
        new = np.zeros((n, 2 * _MAX, 2))
        r, c = np.nonzero(keep)
        new[r, pos[r, c]] = cand[r, c]
        poly, count = new[:, :_MAX], np.minimum(keep.sum(1), _MAX)
    valid = k[None] < count[:, None]
    nxt = (k[None] + 1) % np.maximum(count, 1)[:, None]
    x, y = poly[..., 0], poly[..., 1]
    cross = x * y[rows, nxt] - x[rows, nxt] * y
    return np.abs(np.where(valid, cross, 0).sum(1)) / 2


def rotated_iou(a: np.ndarray, b: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """IoU (N, M) float64 of oriented boxes ``a`` (N, 5) and ``b`` (M, 5), ``cx, cy, w, h, r``."""
    a = np.asarray(a, np.float64).reshape(-1, 5)
    b = np.asarray(b, np.float64).reshape(-1, 5)
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    ca, cb = xywhr_to_corners(a), xywhr_to_corners(b)
    i, j = np.meshgrid(np.arange(len(a)), np.arange(len(b)), indexing="ij")
    inter = convex_intersection_area(ca[i.ravel()], cb[j.ravel()]).reshape(len(a), len(b))
    area_a, area_b = a[:, 2] * a[:, 3], b[:, 2] * b[:, 3]
    return inter / np.maximum(area_a[:, None] + area_b[None] - inter, eps)
