"""Instance masks: the two shapes an instance is given in, COCO RLE, and the training targets.

An instance's *shape* is either polygons (a list of (k, 2) float32 arrays of x, y in image pixels,
k >= 3; COCO allows several per instance, YOLO one) or an RLE (COCO run-length encoding,
``{"size": [h, w], "counts": bytes}``, compressed as pycocotools.mask writes it).

- :func:`parse_coco_segmentation`: a COCO ``segmentation`` value (polygons, compressed or uncompressed
  RLE) checked against its image's size;
- :func:`encode_mask`, :func:`decode_rle`, :func:`shape_to_rle` (polygons as pycocotools rasterises
  them for ``segm`` evaluation): COCO RLE through pycocotools.mask;
- :func:`fill_polygons`: polygons painted on an (h, w) uint8 bitmap the way ultralytics' ``polygon2mask``
  does before it downsamples (coordinates truncated to whole pixels, edges included);
- :func:`clip_polygon`: a polygon cut to a rectangle exactly (Sutherland-Hodgman), so a shape that
  leaves a mosaic tile or the image keeps exactly its visible part;
- :func:`instance_masks`: full-resolution bitmaps (n, H, W) -> the targets (n, H // ratio, W // ratio)
  uint8 (downsampled with bilinear interpolation of 0/1, as ultralytics' ``polygon2mask``), with
  ``overlap`` each pixel given to the smallest instance covering it (ultralytics' ``overlap_mask``:
  instances painted largest first, by their downsampled areas);
- :func:`mask_boxes`, :func:`polygon_boxes`: the xyxy box of a bitmap or of polygons.
"""
from __future__ import annotations

import warnings
from typing import Any, Union

import cv2
import numpy as np
from pycocotools import mask as coco_mask

__all__ = ["Polygons", "Rle", "Shape", "MIN_POLYGON_POINTS", "SegmentationProblem", "parse_coco_segmentation", "encode_mask", "decode_rle",
           "shape_to_rle", "fill_polygons", "clip_polygon", "instance_masks", "mask_boxes", "polygon_boxes",
           "rle_area", "shape_bitmap"]

Polygons = list[np.ndarray]  # each (k, 2) float32 x, y in pixels, k >= 3
Rle = dict[str, Any]  # {"size": [h, w], "counts": bytes}
Shape = Union[Polygons, Rle]
MIN_POLYGON_POINTS = 3


class SegmentationProblem(ValueError):
    """Why a ``segmentation`` value cannot be used (one line; the caller names the file and key)."""


def _polygon(values: Any, where: str) -> np.ndarray:
    if not isinstance(values, (list, tuple)) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise SegmentationProblem(f"{where} should be a flat list of numbers [x1, y1, x2, y2, ...]")
    if len(values) % 2:
        raise SegmentationProblem(f"{where} has an odd number of coordinates ({len(values)}); give x, y pairs")
    if len(values) < 2 * MIN_POLYGON_POINTS:
        raise SegmentationProblem(f"{where} has {len(values) // 2} point(s); a polygon needs at least "
                                  f"{MIN_POLYGON_POINTS}")
    points = np.asarray(values, dtype=np.float32).reshape(-1, 2)
    if not np.isfinite(points).all():
        raise SegmentationProblem(f"{where} has a coordinate that is not finite")
    return points


def parse_coco_segmentation(seg: Any, height: int, width: int, where: str = "segmentation") -> Shape:
    """A COCO ``segmentation`` value -> polygons (a list of (k, 2) float32 arrays, pixels) or a compressed RLE.

    Accepted: a list of flat polygon lists; ``{"size": [h, w], "counts": [run lengths]}`` (uncompressed,
    as COCO's crowd annotations); ``{"size": [h, w], "counts": "..."}`` (compressed). Raises
    :class:`SegmentationProblem` (one line, starting with ``where``) for fewer than 3 points, an odd
    number of coordinates, an RLE whose size is not the image's ``[height, width]`` or whose runs do
    not add up to it."""
    if isinstance(seg, list):
        if not seg:
            raise SegmentationProblem(f"{where} is empty; give the instance's polygon(s) or an RLE")
        return [_polygon(p, f"{where}[{i}]") for i, p in enumerate(seg)]
    if not isinstance(seg, dict) or "size" not in seg or "counts" not in seg:
        raise SegmentationProblem(f"{where} should be a list of polygons or an RLE {{'size': [h, w], 'counts': ...}}")
    size = seg["size"]
    if (not isinstance(size, (list, tuple)) or len(size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in size)):
        raise SegmentationProblem(f"{where}.size should be [height, width], got {size!r}")
    if list(size) != [height, width]:
        raise SegmentationProblem(f"{where}.size {list(size)} (height, width) differs from the image's "
                                  f"[{height}, {width}]; encode the mask at the image's size")
    counts = seg["counts"]
    if isinstance(counts, list):
        if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
            raise SegmentationProblem(f"{where}.counts should be non-negative run lengths")
        if sum(counts) != height * width:
            raise SegmentationProblem(f"{where}.counts add up to {sum(counts)} pixels, not {height}x{width} = "
                                      f"{height * width}")
        return coco_mask.frPyObjects({"size": [height, width], "counts": counts}, height, width)
    if isinstance(counts, (str, bytes)):
        rle = {"size": [height, width], "counts": counts.encode() if isinstance(counts, str) else counts}
        try:
            decoded = _decode(rle)
        except Exception as e:  # pycocotools raises plain Exceptions for a malformed string
            raise SegmentationProblem(f"{where}.counts is not a valid compressed RLE ({e})") from None
        if decoded.shape != (height, width):
            raise SegmentationProblem(f"{where}.counts does not decode to {height}x{width}")
        return rle
    raise SegmentationProblem(f"{where}.counts should be a list of run lengths or a compressed string")


def _decode(rle: Rle) -> np.ndarray:
    """pycocotools' decode (h, w) uint8, without the DeprecationWarning its NumPy 2 array copy raises."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return coco_mask.decode(rle)


def encode_mask(mask: np.ndarray) -> Rle:
    """A binary mask (h, w) -> compressed COCO RLE ``{"size": [h, w], "counts": bytes}``."""
    rle = coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"]}


def decode_rle(rle: Rle) -> np.ndarray:
    """A COCO RLE (compressed; ``counts`` bytes or str) -> (h, w) uint8 0/1."""
    counts = rle["counts"]
    return _decode({"size": list(rle["size"]), "counts": counts.encode() if isinstance(counts, str) else counts})


def rle_area(rle: Rle) -> int:
    """Pixels of an RLE."""
    counts = rle["counts"]
    return int(coco_mask.area({"size": list(rle["size"]), "counts": counts.encode() if isinstance(counts, str)
                               else counts}))


def shape_to_rle(shape: Shape, height: int, width: int) -> Rle:
    """An instance's shape as one compressed RLE of its (``height``, ``width``) image: polygons rasterised
    by pycocotools (what ``COCO.annToRLE`` gives a polygon annotation, so ``segm`` evaluation of our
    ground truth equals pycocotools' of the json), several polygons merged; an RLE as it is."""
    if isinstance(shape, dict):
        return {"size": [int(v) for v in shape["size"]], "counts": shape["counts"]}
    rles = coco_mask.frPyObjects([p.astype(np.float64).reshape(-1).tolist() for p in shape], height, width)
    rle = coco_mask.merge(rles)
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"]}


def fill_polygons(polygons: Polygons, height: int, width: int) -> np.ndarray:
    """Polygons (each (k, 2) x, y pixels) painted 1 on a zero (height, width) uint8 bitmap, as ultralytics'
    ``polygon2mask`` paints them (coordinates truncated toward zero, boundary pixels included; each
    polygon filled on its own, so several polygons are their union)."""
    out = np.zeros((height, width), np.uint8)
    for p in polygons:
        if len(p) >= 1:
            cv2.fillPoly(out, [np.asarray(p, dtype=np.float32).astype(np.int32).reshape(-1, 1, 2)], color=1)
    return out


def shape_bitmap(shape: Shape, height: int, width: int) -> np.ndarray:
    """An instance's shape as a (height, width) uint8 0/1 bitmap: polygons by :func:`fill_polygons`, an
    RLE decoded (its size must be the image's)."""
    return decode_rle(shape) if isinstance(shape, dict) else fill_polygons(shape, height, width)


def clip_polygon(points: np.ndarray, x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    """The polygon ``points`` (k, 2) cut to the rectangle [x0, x1] x [y0, y1] (Sutherland-Hodgman: exact,
    no resampling needed). A concave polygon that leaves and re-enters keeps a zero-width edge along the
    border between its parts, which :func:`fill_polygons` paints as a line of border pixels (as the
    coordinate clipping of ultralytics does). (0, 2) when nothing is inside."""
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    if len(pts) == 0:
        return np.zeros((0, 2), np.float32)
    if pts[:, 0].min() >= x0 and pts[:, 0].max() <= x1 and pts[:, 1].min() >= y0 and pts[:, 1].max() <= y1:
        return pts.astype(np.float32)
    for axis, bound, keep_greater in ((0, x0, True), (0, x1, False), (1, y0, True), (1, y1, False)):
        if len(pts) == 0:
            break
        v = pts[:, axis] - bound
        inside = v >= 0 if keep_greater else v <= 0
        prev = np.roll(pts, 1, axis=0)
        pv = np.roll(v, 1)
        pin = np.roll(inside, 1)
        out = []
        for p, q, vi, vq, ins, qin in zip(pts, prev, v, pv, inside, pin):  # edge q -> p
            if ins != qin:  # the edge crosses the line: its crossing point
                t = vq / (vq - vi)
                c = q + t * (p - q)
                c[axis] = bound
                out.append(c)
            if ins:
                out.append(p)
        pts = np.array(out, dtype=np.float64).reshape(-1, 2)
    return pts.astype(np.float32)


def polygon_boxes(shapes: list[Polygons]) -> np.ndarray:
    """The xyxy box (n, 4) float32 of each instance's polygons (zeros for an instance without points)."""
    out = np.zeros((len(shapes), 4), np.float32)
    for i, polys in enumerate(shapes):
        pts = np.concatenate([np.asarray(p, np.float32).reshape(-1, 2) for p in polys]) if polys else np.zeros((0, 2))
        if len(pts):
            out[i] = (pts[:, 0].min(), pts[:, 1].min(), pts[:, 0].max(), pts[:, 1].max())
    return out


def mask_boxes(masks: np.ndarray) -> np.ndarray:
    """The xyxy box (n, 4) float32 of each bitmap of ``masks`` (n, h, w) in pixel corners: a mask whose
    pixels span columns a..b has x from a to b + 1 (zeros for an empty mask)."""
    out = np.zeros((len(masks), 4), np.float32)
    for i, m in enumerate(masks):
        cols, rows = np.flatnonzero(m.any(axis=0)), np.flatnonzero(m.any(axis=1))
        if len(cols):
            out[i] = (cols[0], rows[0], cols[-1] + 1, rows[-1] + 1)
    return out


def instance_masks(full: np.ndarray, ratio: int = 4, overlap: bool = True) -> np.ndarray:
    """Bitmaps (n, H, W) 0/1 at network-input size -> targets (n, H // ratio, W // ratio) uint8 0/1.

    Each bitmap is resized with bilinear interpolation (the 0/1 values interpolated, then truncated to
    uint8, as OpenCV does), as ultralytics' ``polygon2mask`` resizes its filled polygon. With
    ``overlap`` (ultralytics' ``overlap_mask``): instances are sorted by their downsampled area,
    largest first (``argsort(-area)``), and painted in that order, so a pixel covered by several
    belongs to the last, smallest one; each row is then that instance's share."""
    n, h, w = full.shape
    hm, wm = h // ratio, w // ratio
    if n == 0:
        return np.zeros((0, hm, wm), np.uint8)
    small = np.stack([cv2.resize(m.astype(np.uint8), (wm, hm)) if ratio != 1 else m.astype(np.uint8) for m in full])
    if not overlap:
        return small
    areas = small.reshape(n, -1).sum(axis=1)
    order = np.argsort(-areas)
    owner = np.zeros((hm, wm), np.int32)  # 0: background, k + 1: the k-th painted
    for k, i in enumerate(order):
        np.maximum(owner, small[i].astype(np.int32) * (k + 1), out=owner)
    out = np.zeros_like(small)
    for k, i in enumerate(order):
        out[i] = owner == k + 1
    return out
