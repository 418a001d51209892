"""Instance shapes through the geometry of an albumentations pipeline, exactly as its boxes go.

An albumentations ``Compose`` built with ``save_applied_params=True`` reports what each transform did
(``out["applied_transforms"]``: the resize scale, the pad, the affine matrix, the crop, the flips).
:func:`replay_points` moves polygon points (x, y pixels, corner convention: pixel ``i`` spans
``[i, i + 1)``, as boxes) through the same steps: the same matrix the boxes get (albumentations'
``bbox_matrix``: the image's warp matrix shifted by half a pixel), so a polygon, its box and the image
stay aligned under letterbox, rotation, scale, shear, translation, crops (padding ones too) and flips. (albumentations'
own keypoints are not used: their flips take pixel-centre coordinates and their resize pixel corners.)
Bitmaps (decoded RLEs) go through the pipeline as its ``masks``, warped with the image's matrix
(nearest neighbour).

:func:`place_polygons` and :func:`place_bitmap` put an image's shapes on the 2S x 2S mosaic canvas:
scaled like the image, moved to its tile and cut to the tile's visible part (polygons exactly, with
:func:`~vision_attn.data.masks.clip_polygon`; dense resampling, as ultralytics does before it clips
coordinates, is not needed for an exact cut).
"""
from __future__ import annotations

from typing import Any, Sequence

import cv2
import numpy as np

from vision_attn.data.masks import clip_polygon
from vision_attn.errors import ConfigError

__all__ = ["replay_points", "place_polygons", "place_bitmap", "GEOMETRIC", "COLOUR"]

GEOMETRIC = frozenset({"LongestMaxSize", "PadIfNeeded", "Affine", "CenterCrop", "HorizontalFlip", "VerticalFlip"})
COLOUR = frozenset({"HueSaturationValue"})  # pixels only: nothing moves


def _out_shapes(applied: Sequence[tuple[str, dict[str, Any]]], final: tuple[int, int]) -> list[tuple[int, int]]:
    """(h, w) after each applied transform: the next one's input, the final image's for the last."""
    ins = [tuple(int(v) for v in p["shape"][:2]) for _, p in applied]
    return [*ins[1:], final]


def replay_points(points: np.ndarray, applied: Sequence[tuple[str, dict[str, Any]]],
                  final: tuple[int, int]) -> np.ndarray:
    """Points (k, 2) x, y in the input image's pixels -> the same points in the output image's, through
    ``applied`` (``out["applied_transforms"]``) and the output image's (h, w) ``final``. A transform without
    geometry here (not in :data:`GEOMETRIC` or :data:`COLOUR`) is a ConfigError naming it. A padding
    ``CenterCrop`` moves the points as the constant border does (a reflecting border adds mirrored boxes,
    which no shape follows)."""
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2).copy()
    for (name, p), (oh, ow) in zip(applied, _out_shapes(applied, final)):
        h, w = (int(v) for v in p["shape"][:2])
        if name == "LongestMaxSize":
            pts *= (ow / w, oh / h)
        elif name == "PadIfNeeded":
            pts += (p["pad_left"], p["pad_top"])
        elif name == "Affine":
            m = np.asarray(p["bbox_matrix"], dtype=np.float64)
            pts = pts @ m[:2, :2].T + m[:2, 2]
        elif name == "CenterCrop":  # a crop larger than the image pads it first (pad_if_needed): a shift either way
            pad = p.get("pad_params") or {}
            x0, y0 = p["crop_coords"][:2]
            pts += (pad.get("pad_left", 0) - x0, pad.get("pad_top", 0) - y0)
        elif name == "HorizontalFlip":
            pts[:, 0] = w - pts[:, 0]
        elif name == "VerticalFlip":
            pts[:, 1] = h - pts[:, 1]
        elif name not in COLOUR:
            raise ConfigError(f"transform {name}: instance shapes (masks, keypoints, oriented boxes) cannot follow it; "
                              f"a pipeline with them takes only {', '.join(sorted(GEOMETRIC))} and the colour-only "
                              f"{', '.join(sorted(COLOUR))}")
    return pts.astype(np.float32)


def place_polygons(polygons: Sequence[np.ndarray], r: float, dx: float, dy: float,
                   tile: tuple[int, int, int, int]) -> list[np.ndarray]:
    """An image's polygons on the mosaic canvas: scaled by ``r``, moved by (``dx``, ``dy``) and cut to
    ``tile`` (xa, ya, xb, yb); polygons with nothing left are dropped."""
    xa, ya, xb, yb = tile
    out = []
    for p in polygons:
        c = clip_polygon(np.asarray(p, np.float32) * np.float32(r) + np.array([dx, dy], np.float32), xa, ya, xb, yb)
        if len(c) >= 3:
            out.append(c)
    return out


def place_bitmap(bitmap: np.ndarray, size: tuple[int, int], canvas: tuple[int, int], src: tuple[int, int],
                 tile: tuple[int, int, int, int]) -> np.ndarray:
    """An image's bitmap (h0, w0) on a zero ``canvas`` (H, W): resized to ``size`` (w, h) with nearest
    neighbour, its window from ``src`` (sx, sy) copied into ``tile`` (xa, ya, xb, yb), as the image is."""
    w, h = size
    resized = bitmap if bitmap.shape[::-1] == (w, h) else cv2.resize(bitmap, (w, h), interpolation=cv2.INTER_NEAREST)
    out = np.zeros(canvas, np.uint8)
    xa, ya, xb, yb = tile
    sx, sy = src
    out[ya:yb, xa:xb] = resized[sy:sy + (yb - ya), sx:sx + (xb - xa)]
    return out
