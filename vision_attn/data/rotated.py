"""Oriented boxes: four corners <-> (cx, cy, w, h, r), and a box cut by the image edge.

Conventions, as ultralytics' (``xyxyxyxy2xywhr``, ``xywhr2xyxyxyxy``, ``Instances.clip(preserve_obb=True)``):

- :func:`corners_to_xywhr`: the minimum-area rectangle of each polygon (``cv2.minAreaRect``), in its
  canonical form: ``w`` the longer side, the rotation ``r`` in radians in [-pi/4, 3pi/4) (the angle of
  the ``w`` side from the x axis, y down); any polygon (a sheared rectangle, a cut one) is re-fit so;
- :func:`xywhr_to_corners`: the four corners ``c + u + v``, ``c + u - v``, ``c - u - v``, ``c - u + v``
  with ``u = w/2 (cos r, sin r)``, ``v = h/2 (-sin r, cos r)``;
- :func:`fit_visible`: a box partly outside a rectangle (the image, a mosaic tile) becomes the rectangle,
  in the box's own orientation, that bounds its visible part (the polygon cut exactly, not its points
  clipped), so an edge crop never turns it; nothing visible: None.
"""
from __future__ import annotations

import cv2
import numpy as np

from vision_attn.data.masks import clip_polygon

__all__ = ["corners_to_xywhr", "xywhr_to_corners", "fit_visible", "polygon_area"]


def corners_to_xywhr(corners: np.ndarray) -> np.ndarray:
    """Polygons (n, k, 2) (or (n, 2k)) in pixels -> (n, 5) float64 canonical ``cx, cy, w, h, r``."""
    pts = np.asarray(corners, dtype=np.float32)
    pts = pts.reshape(len(pts), -1, 2) if pts.size else pts.reshape(0, 4, 2)
    out = np.zeros((len(pts), 5), np.float64)
    for i, p in enumerate(pts):
        (cx, cy), (w, h), angle = cv2.minAreaRect(p)
        r = np.deg2rad(angle)
        if w < h:
            w, h, r = h, w, r + np.pi / 2
        r = (r + np.pi / 4) % np.pi - np.pi / 4  # into [-pi/4, 3pi/4)
        out[i] = cx, cy, w, h, r
    return out


def xywhr_to_corners(xywhr: np.ndarray) -> np.ndarray:
    """(n, 5) ``cx, cy, w, h, r`` -> corners (n, 4, 2) (see the module docstring for their order)."""
    b = np.asarray(xywhr, dtype=np.float64).reshape(-1, 5)
    c, w, h, r = b[:, None, :2], b[:, 2:3], b[:, 3:4], b[:, 4:5]
    u = np.concatenate([w / 2 * np.cos(r), w / 2 * np.sin(r)], axis=1)[:, None]
    v = np.concatenate([-h / 2 * np.sin(r), h / 2 * np.cos(r)], axis=1)[:, None]
    return np.concatenate([c + u + v, c + u - v, c - u - v, c - u + v], axis=1)


def polygon_area(points: np.ndarray) -> float:
    """The area of a simple polygon (k, 2) (shoelace)."""
    p = np.asarray(points, np.float64).reshape(-1, 2)
    if len(p) < 3:
        return 0.0
    x, y = p[:, 0], p[:, 1]
    return float(abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2)


def fit_visible(corners: np.ndarray, x0: float, y0: float, x1: float, y1: float) -> np.ndarray | None:
    """A box's corners (k, 2) -> the corners (4, 2) float32 of the rectangle in the box's orientation that
    bounds its part inside [x0, x1] x [y0, y1]; the corners as they are when all inside; None when no area
    is inside."""
    pts = np.asarray(corners, np.float32).reshape(-1, 2)
    if pts[:, 0].min() >= x0 and pts[:, 0].max() <= x1 and pts[:, 1].min() >= y0 and pts[:, 1].max() <= y1:
        return pts
    visible = clip_polygon(pts, x0, y0, x1, y1).astype(np.float64)
    if len(visible) < 3 or polygon_area(visible) <= 0:
        return None
    (_, _), (w, h), angle = cv2.minAreaRect(pts)
    r = np.deg2rad(angle + (90.0 if w < h else 0.0))
    basis = np.array([[np.cos(r), -np.sin(r)], [np.sin(r), np.cos(r)]])  # columns: the box's axes
    aligned = visible @ basis
    (u0, v0), (u1, v1) = aligned.min(0), aligned.max(0)
    rect = np.array([[u1, v1], [u1, v0], [u0, v0], [u0, v1]])
    return (rect @ basis.T).astype(np.float32)
