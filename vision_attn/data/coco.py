"""COCO json detection data: an images folder and an ``instances_*.json`` annotations file.

Categories sorted by id give the class indices 0..nc-1 (``names``; ``category_ids[i]`` is the COCO id of
class ``i``). ``bbox`` is ``[x, y, width, height]`` in pixels. Checked on load, every error naming the
file and the key path (``annotations[12].category_id``): malformed JSON (line and column), a missing or
mistyped key, an annotation whose ``image_id`` or ``category_id`` is not among ``images`` /
``categories``. A missing image file, one that is not an image or a broken link go to the data set's
:class:`~vision_attn.data.faults.Faults` (an error naming it by default; with ``skip_bad_images`` the
image and its annotations are left out and listed). Boxes partly outside their image are clipped,
degenerate ones dropped, duplicates (same image, class and box) removed, each named by its
``annotations[j]`` in the notes and counted; ``iscrowd`` boxes are skipped and counted, images without
boxes kept as negatives (see ``dataset.stats``).

With ``masks=True`` each annotation's ``segmentation`` is its shape: polygons (``[[x1, y1, x2, y2, ...],
...]``, pixels, several per instance allowed) or an RLE (``{"size": [h, w], "counts": ...}``, compressed
or uncompressed). Crowd annotations are then kept on the record (``record.crowd``) for ``segm``
evaluation and still never trained on. A problem (through the faults policy, named by file and
``annotations[j]``): a missing or empty segmentation, a polygon with fewer than 3 points or an odd number
of coordinates, an RLE whose size is not the image's. Polygon points outside the image are clipped to
it (a note).

With ``keypoints=True`` (a COCO keypoints json) each annotation's ``keypoints`` ``[x1, y1, v1, ...]``
(pixels, visibility 0/1/2) is its instance's points and ``categories[i].keypoints`` / ``skeleton`` name
them (:func:`~vision_attn.data.keypoints.keypoint_spec_from_coco`; ``flip_idx`` from the names'
left/right pairs unless given). A problem, named by file and ``annotations[j]``: a length other than
3 K, a visibility outside {0, 1, 2}, ``num_keypoints`` not the number of labelled points, a labelled
point outside the image. The annotation's ``area`` is kept as the OKS scale of evaluation.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from vision_attn.data.detection import (
    CLIP_TOLERANCE,
    DetectionDataset,
    DetectionRecord,
    CrowdInstances,
    DetectionStats,
    check_boxes_kept,
)
from vision_attn.data.faults import Faults, image_size
from vision_attn.data.keypoints import KeypointSpec, keypoint_spec_from_coco
from vision_attn.data.masks import SegmentationProblem, Shape, parse_coco_segmentation
from vision_attn.errors import ConfigError, DataError
from vision_attn.io.json import read_json

__all__ = ["CocoDetection"]


def _get(obj: Any, key: str, path: str, file: Path, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(obj, dict):
        raise DataError(f"{file}: {path} should be a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise DataError(f"{file}: {path}.{key} is missing" if path else f"{file}: key '{key}' is missing")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        where = f"{path}.{key}" if path else key
        raise DataError(f"{file}: {where} should be {want}, got {value!r}")
    return value


def _read_document(file: Path) -> dict[str, Any]:
    """The annotations file's JSON object, its top level checked to be an object."""
    if not file.is_file():
        raise DataError(f"annotations file {file}: no such file; give a COCO instances json")
    doc = read_json(file, what="annotations file")
    if not isinstance(doc, dict):
        raise DataError(f"{file}: expected a JSON object with 'images', 'annotations' and 'categories'")
    return doc


def _categories(doc: dict[str, Any], file: Path) -> tuple[list[int], list[str]]:
    """The COCO ids and names of ``categories`` sorted by id: class ``i`` is the ``i``-th of each."""
    cats = _get(doc, "categories", "", file, list)
    if not cats:
        raise DataError(f"{file}: categories is empty; list every class as {{'id': 1, 'name': '...'}}")
    parsed = []
    for i, c in enumerate(cats):
        cid = _get(c, "id", f"categories[{i}]", file, int)
        name = _get(c, "name", f"categories[{i}]", file, str)
        if cid == 0:
            raise DataError(f"{file}: categories[{i}].id is 0; COCO category ids start at 1 (0 breaks "
                            f"evaluation): renumber them")
        parsed.append((cid, name))
    parsed.sort()
    ids = [cid for cid, _ in parsed]
    if len(set(ids)) != len(ids):
        dup = sorted({c for c in ids if ids.count(c) > 1})
        raise DataError(f"{file}: categories repeat id(s) {dup}; give each category one id")
    return ids, [name for _, name in parsed]


def _shape(a: dict[str, Any], where: str, h: int, w: int, file: Path, faults: Faults) -> Shape | None:
    """The annotation's ``segmentation`` as a shape in its image (polygon points clipped to it, noted);
    None after ``faults.bad``."""
    if "segmentation" not in a:
        faults.bad(file, "segmentation is missing; masks need each instance's polygons or RLE", where,
                   fix="add the segmentation or open the data set without masks")
        return None
    try:
        shape = parse_coco_segmentation(a["segmentation"], h, w, "segmentation")
    except SegmentationProblem as e:
        faults.bad(file, str(e), where, fix="fix the segmentation or remove the annotation")
        return None
    if isinstance(shape, list):
        clipped = [np.clip(p, 0, [w, h]).astype(np.float32) for p in shape]
        if any(np.abs(c - p).max() > CLIP_TOLERANCE for c, p in zip(clipped, shape)):
            faults.note(file, f"polygon reaches outside the {w}x{h} image; clipped", where, kind="polygons clipped")
        shape = clipped
    return shape


def _keypoints(a: dict[str, Any], where: str, h: int, w: int, kpt: KeypointSpec, file: Path,
               faults: Faults) -> np.ndarray | None:
    """The annotation's ``keypoints`` as (K, 3) float32 (x, y pixels, visibility); None after ``faults.bad``."""
    raw = a.get("keypoints")
    if not isinstance(raw, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw):
        faults.bad(file, "keypoints is missing or not a list of numbers [x1, y1, v1, ...]", where,
                   fix="add the instance's keypoints")
        return None
    if len(raw) != 3 * kpt.num:
        faults.bad(file, f"keypoints has {len(raw)} numbers; the categories name {kpt.num} points, so "
                         f"{3 * kpt.num} (x y v each) are needed", where, fix="fix the annotation")
        return None
    pts = np.asarray(raw, np.float64).reshape(kpt.num, 3)
    bad = pts[~np.isin(pts[:, 2], (0, 1, 2)), 2]
    if len(bad):
        faults.bad(file, f"keypoint visibility {bad[0]:g} is not 0, 1 or 2 (0: not labelled, 1: hidden, 2: "
                         f"visible)", where, fix="fix the annotation")
        return None
    n = a.get("num_keypoints")
    if n is not None and n != int((pts[:, 2] > 0).sum()):
        faults.bad(file, f"num_keypoints is {n} but {int((pts[:, 2] > 0).sum())} keypoints are labelled (v > 0)",
                   where, fix="make num_keypoints the number of labelled points")
        return None
    xy = pts[pts[:, 2] > 0, :2]
    slack = np.array([w, h]) * 0.01
    if len(xy) and (not np.isfinite(xy).all() or (xy < -slack).any() or (xy > np.array([w, h]) + slack).any()):
        faults.bad(file, f"a labelled keypoint lies outside the {w}x{h} image ({np.round(xy, 1).tolist()})", where,
                   fix="keypoints are in the image's pixels; fix them or set their visibility to 0")
        return None
    pts[:, :2] = np.clip(pts[:, :2], 0, [w, h])
    return pts.astype(np.float32)


def _records(doc: dict[str, Any], file: Path, images_dir: Path, category_ids: list[int],
             faults: Faults, masks: bool = False,
             kpt: KeypointSpec | None = None) -> tuple[list[DetectionRecord], DetectionStats]:
    """One record per usable entry of ``images`` with the boxes of its ``annotations``, and the counts of
    boxes skipped (crowd), clipped, dropped (degenerate) and removed (duplicates); with ``masks`` the
    shapes of the boxes and the crowd instances too."""
    class_of = {cid: k for k, cid in enumerate(category_ids)}
    images = _get(doc, "images", "", file, list)
    order: dict[int, int] = {}
    meta: list[tuple[int, Path, int, int] | None] = []  # None: a bad image, left out
    for i, im in enumerate(images):
        iid = _get(im, "id", f"images[{i}]", file, int)
        name = _get(im, "file_name", f"images[{i}]", file, str)
        if iid in order:
            raise DataError(f"{file}: images[{i}].id {iid} repeats images[{order[iid]}].id; give each image "
                            f"its own id")
        path = images_dir / name
        order[iid] = i
        if not path.is_file() and not path.is_symlink():
            faults.bad(file, f"image {path} not found", f"images[{i}].file_name",
                       fix="put it there or remove the image and its annotations")
            meta.append(None)
            continue
        if "width" in im and "height" in im:  # the image itself is read when it is decoded (or verified)
            size = (_get(im, "width", f"images[{i}]", file, int), _get(im, "height", f"images[{i}]", file, int))
        else:
            size = image_size(path, faults)  # from its header; not an image, a broken link: a problem
            if size is None:
                meta.append(None)
                continue
        meta.append((iid, path, size[1], size[0]))

    anns = _get(doc, "annotations", "", file, list)
    stats = DetectionStats()
    n = len(anns)
    ann_image = np.empty(n, np.int64)
    ann_class = np.empty(n, np.int64)
    ann_box = np.empty((n, 4), np.float32)
    keep = np.ones(n, bool)
    shapes: list[Shape | None] = [None] * n
    points: list[np.ndarray | None] = [None] * n
    areas = np.zeros(n, np.float64)
    bad_images: set[int] = set()
    for j, a in enumerate(anns):
        where = f"annotations[{j}]"
        iid = _get(a, "image_id", where, file, int)
        if iid not in order:
            raise DataError(f"{file}: {where}.image_id {iid} is not among the ids of 'images'; add the image "
                            f"or remove the annotation")
        cid = _get(a, "category_id", where, file, int)
        if cid not in class_of:
            raise DataError(f"{file}: {where}.category_id {cid} is not among the category ids {category_ids[:12]}"
                            f"{' ...' if len(category_ids) > 12 else ''}; add the category or fix the id")
        box = _get(a, "bbox", where, file, list)
        if len(box) != 4 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in box):
            raise DataError(f"{file}: {where}.bbox should be 4 numbers [x, y, width, height], got {box!r}")
        if a.get("iscrowd", 0):
            keep[j] = False
            stats.crowd += 1
        ann_image[j], ann_class[j] = order[iid], class_of[cid]
        x, y, bw, bh = box
        ann_box[j] = (x, y, x + bw, y + bh)
        m = meta[order[iid]]
        if masks and m is not None and order[iid] not in bad_images:
            shapes[j] = _shape(a, where, m[2], m[3], file, faults)
            if shapes[j] is None:
                bad_images.add(order[iid])
        if kpt is not None and m is not None and order[iid] not in bad_images and keep[j]:
            points[j] = _keypoints(a, where, m[2], m[3], kpt, file, faults)
            area = a.get("area")
            areas[j] = float(area) if isinstance(area, (int, float)) and area > 0 else 0.53 * bw * bh
            if points[j] is None:
                bad_images.add(order[iid])
    crowd_of: dict[int, list[int]] = {}
    if masks:
        for j in np.flatnonzero(~keep):
            crowd_of.setdefault(int(ann_image[j]), []).append(int(j))
    crowd_of = {i: js for i, js in crowd_of.items() if i not in bad_images}
    all_box, all_class = ann_box.copy(), ann_class.copy()
    ann_image, ann_class, ann_box = ann_image[keep], ann_class[keep], ann_box[keep]

    sort = np.argsort(ann_image, kind="stable")
    ann_image, ann_class, ann_box = ann_image[sort], ann_class[sort], ann_box[sort]
    bounds = np.searchsorted(ann_image, np.arange(len(meta) + 1))
    ann_index = np.flatnonzero(keep)[sort]
    records = []
    for i, m in enumerate(meta):
        if m is None or i in bad_images:
            stats.skipped += 1
            continue
        iid, path, h, w = m
        lo, hi = bounds[i], bounds[i + 1]
        kps = None
        if kpt is not None:
            kps = np.array([points[j] for j in ann_index[lo:hi]], np.float32).reshape(-1, kpt.num, 3)
        boxes, labels, kept = check_boxes_kept(ann_box[lo:hi], ann_class[lo:hi],
                                               [f"annotations[{j}]" for j in ann_index[lo:hi]],
                                               path, h, w, file, faults, stats, extra=kps)
        record = DetectionRecord(path, iid, h, w, boxes, labels)
        if kps is not None:
            record.keypoints, record.areas = kps[kept], areas[ann_index[lo:hi][kept]]
        if masks:
            record.shapes = [shapes[ann_index[lo + k]] for k in kept]
            crowd = crowd_of.get(i, [])
            crowd_boxes = np.array([all_box[j] for j in crowd], np.float32).reshape(-1, 4)
            np.clip(crowd_boxes[:, 0::2], 0, w, out=crowd_boxes[:, 0::2])
            np.clip(crowd_boxes[:, 1::2], 0, h, out=crowd_boxes[:, 1::2])
            record.crowd = CrowdInstances(crowd_boxes, np.array([all_class[j] for j in crowd], np.int64),
                                          [shapes[j] for j in crowd])
        records.append(record)
    return records, stats


class CocoDetection(DetectionDataset):
    """Images of ``images_dir`` with the boxes of ``annotations`` (a COCO ``instances`` json)."""

    def __init__(self, images_dir: str | Path, annotations: str | Path, *,
                 transform: Callable[[DetectionDataset, int], Any] | None = None, faults: Faults | None = None,
                 masks: bool = False, keypoints: bool = False, flip_idx: Sequence[int] | None = None,
                 kpt_oks_sigmas: Sequence[float] | None = None):
        super().__init__(transform, faults)
        if masks and keypoints:
            raise ConfigError("open a COCO data set with masks or with keypoints, not both")
        self.masks = masks
        self.images_dir, self.annotations_file = Path(images_dir), Path(annotations)
        doc = _read_document(self.annotations_file)
        self.category_ids, self.names = _categories(doc, self.annotations_file)
        if keypoints:
            self.keypoint_spec = keypoint_spec_from_coco(doc["categories"], self.annotations_file, flip_idx,
                                                         kpt_oks_sigmas)
        self.records, stats = _records(doc, self.annotations_file, self.images_dir, self.category_ids,
                                       self.faults, masks, self.keypoint_spec)
        self.stats = self._finish_stats(stats)

    def __repr__(self) -> str:
        return f"CocoDetection({str(self.annotations_file)!r}, {len(self)} images, {len(self.names)} classes)"
