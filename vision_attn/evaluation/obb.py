"""Oriented-box mAP: COCO's matching and averaging with the rotated IoU of :mod:`.rotated_iou`.

``obb_map(ground_truth, detections, names=..., category_ids=...)`` takes, per image, ground truth
``{image_id, rboxes (n, 5) cx, cy, w, h, r in original pixels (r in radians), labels (n,), orig_size}``
(what :meth:`vision_attn.data.DetectionDataset.ground_truth` gives for a set opened with ``obb=True``)
and detections ``{image_id, rboxes (m, 5), scores (m,), labels (m,)}``. pycocotools' COCOeval does the
rest exactly as for boxes (greedy matching by score per class and image, 10 IoU thresholds .5:.95,
101-point precision, areas ``w * h``), with :func:`~vision_attn.evaluation.rotated_iou.rotated_iou`
in place of the axis-aligned IoU. On boxes with r = 0 it gives :func:`~vision_attn.evaluation.coco_map`'s
numbers. ``iou``: another IoU of oriented boxes ((N, 5), (M, 5) -> (N, M)) to match with, e.g. a ProbIoU to
see what ultralytics' matching makes of the same detections (the polygon's is the DOTA devkit's measure).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
from pycocotools.cocoeval import COCOeval

from vision_attn.evaluation.coco import (
    CocoResult,
    _array,
    _evaluate,
    _labels,
    check_category_mapping,
    empty_result,
    found_image,
    summarise,
    truth_image,
)
from vision_attn.evaluation.rotated_iou import rotated_iou
from vision_attn.data.rotated import xywhr_to_corners
from vision_attn.errors import DataError

__all__ = ["obb_map", "RotatedCOCOeval"]


class RotatedCOCOeval(COCOeval):
    """COCOeval whose IoU is the oriented boxes' (each annotation and result carries ``rbox``): :attr:`iou`."""

    iou: Callable[[np.ndarray, np.ndarray], np.ndarray] = staticmethod(rotated_iou)

    def computeIoU(self, imgId: int, catId: int) -> Any:  # noqa: N802 (pycocotools' name)
        p = self.params
        gt = self._gts[imgId, catId] if p.useCats else [g for c in p.catIds for g in self._gts[imgId, c]]
        dt = self._dts[imgId, catId] if p.useCats else [d for c in p.catIds for d in self._dts[imgId, c]]
        if not gt or not dt:
            return []
        order = np.argsort([-d["score"] for d in dt], kind="mergesort")[:p.maxDets[-1]]
        return self.iou(np.array([dt[i]["rbox"] for i in order]), np.array([g["rbox"] for g in gt]))


def _rboxes(value: Any, what: str) -> np.ndarray:
    r = _array(value, np.float64, (5,), what)
    if len(r) and ((r[:, 2] <= 0) | (r[:, 3] <= 0)).any():
        raise DataError(f"{what}: an oriented box with a side <= 0; rboxes are cx, cy, w, h, r (pixels, radians)")
    return r


def _enclosing(r: np.ndarray) -> list[list[float]]:
    c = xywhr_to_corners(r)
    lo, hi = c.min(axis=1), c.max(axis=1)
    return np.concatenate([lo, hi - lo], axis=1).tolist()


def obb_map(ground_truth: Sequence[Mapping[str, Any]], detections: Sequence[Mapping[str, Any]], *,
            names: Sequence[str], category_ids: Sequence[int], max_dets: int = 100,
            iou: Callable[[np.ndarray, np.ndarray], np.ndarray] = rotated_iou) -> CocoResult:
    """COCO-style AP of oriented boxes (see the module docstring)."""
    ids = check_category_mapping(names, category_ids)
    nc = len(names)
    images, annotations, seen = [], [], set()
    n_gt = np.zeros(nc, np.int64)
    for g in ground_truth:
        iid, what, (h, w) = truth_image(g, seen)
        r = _rboxes(g["rboxes"], what)
        labels = _labels(g["labels"], len(r), nc, what, "labels are class indices (0-based), not category ids")
        n_gt += np.bincount(labels, minlength=nc)
        images.append({"id": iid, "width": w, "height": h})
        annotations += [{"id": len(annotations) + 1 + j, "image_id": iid, "category_id": ids[c], "bbox": b,
                         "area": float(q[2] * q[3]), "iscrowd": 0, "rbox": q.tolist()}
                        for j, (b, c, q) in enumerate(zip(_enclosing(r), labels.tolist(), r))]
    results = []
    for d in detections:
        iid, what = found_image(d, seen, "detections")
        r = _rboxes(d["rboxes"], what)
        scores = _array(d["scores"], np.float64, (), what)
        if len(scores) != len(r):
            raise DataError(f"{what}: {len(scores)} scores for {len(r)} oriented boxes")
        labels = _labels(d["labels"], len(r), nc, what, "detections carry class indices 0..nc-1")
        results += [{"image_id": iid, "category_id": ids[c], "bbox": b, "score": s, "rbox": q.tolist()}
                    for b, s, c, q in zip(_enclosing(r), scores.tolist(), labels.tolist(), r)]
    if not results:
        return empty_result(names, n_gt)
    categories = [{"id": cid, "name": str(n)} for cid, n in zip(ids, names)]
    dataset = {"images": images, "annotations": annotations, "categories": categories}
    evaluator = RotatedCOCOeval if iou is rotated_iou else type("RotatedCOCOeval", (RotatedCOCOeval,),
                                                                 {"iou": staticmethod(iou)})
    precision, stats = _evaluate(dataset, results, "pycocotools", max_dets, "bbox", evaluator=evaluator)
    return summarise(precision, stats, names, ids, n_gt)
