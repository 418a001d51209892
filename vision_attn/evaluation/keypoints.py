"""Keypoint mAP: pycocotools' keypoint evaluation (OKS, ``iouType="keypoints"``) with the set's sigmas.

``keypoint_map(ground_truth, predictions, names=..., category_ids=..., sigmas=...)`` takes, per image,
ground truth ``{image_id, boxes (n, 4) xyxy, labels (n,), keypoints (n, K, 3) x, y original pixels and
visibility 0/1/2, areas (n,) (the OKS scale; default 0.53 x the box's area, as ultralytics), orig_size}``
(what :meth:`vision_attn.data.DetectionDataset.ground_truth` gives for a set opened with
``keypoints=True``) and predictions ``{image_id, scores (m,), labels (m,), keypoints (m, K, 2 or 3)}``
(x, y in original pixels; a third column, the point's confidence, is passed on as COCO's ``v`` and not
used by OKS). Instances with no labelled point are ignored, as COCO does. COCOeval runs with
``params.kpt_oks_sigmas = sigmas`` and ``maxDets = [max_dets]`` (COCO's 20); the result is a
:class:`~vision_attn.evaluation.CocoResult` of OKS AP@[.5:.95], AP50 and AP75.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from vision_attn.evaluation.coco import (
    CocoResult,
    _array,
    _evaluate,
    _labels,
    _xywh,
    check_category_mapping,
    empty_result,
    found_image,
    summarise,
    truth_image,
)
from vision_attn.errors import ConfigError, DataError

__all__ = ["keypoint_map"]


def _points(value: Any, n: int, k: int, what: str) -> np.ndarray:
    """Keypoints (n, k, 2 or 3) as float64, or a DataError naming ``what``."""
    if isinstance(value, torch.Tensor):
        value = value.detach().float().cpu().numpy()
    pts = np.asarray(value, np.float64)
    if n == 0 and pts.size == 0:
        return np.zeros((0, k, 3))
    if pts.ndim != 3 or pts.shape[:2] != (n, k) or pts.shape[-1] not in (2, 3):
        raise DataError(f"{what}: keypoints of shape {tuple(pts.shape)}; give ({n}, {k}, 2 or 3) (the set's "
                        f"{k} keypoints per instance)")
    return pts


def keypoint_map(ground_truth: Sequence[Mapping[str, Any]], predictions: Sequence[Mapping[str, Any]], *,
                 names: Sequence[str], category_ids: Sequence[int], sigmas: Sequence[float],
                 max_dets: int = 20) -> CocoResult:
    """OKS keypoint AP of ``predictions`` against ``ground_truth`` (see the module docstring)."""
    ids = check_category_mapping(names, category_ids)
    sig = np.asarray(sigmas, np.float64).reshape(-1)
    k = len(sig)
    if k == 0 or (sig <= 0).any():
        raise ConfigError(f"sigmas={list(sig)}: give one positive OKS sigma per keypoint")
    nc = len(names)
    images, annotations, seen = [], [], set()
    n_gt = np.zeros(nc, np.int64)
    for g in ground_truth:
        iid, what, (h, w) = truth_image(g, seen)
        boxes = _array(g["boxes"], np.float64, (4,), what)
        labels = _labels(g["labels"], len(boxes), nc, what, "labels are class indices (0-based), not category ids")
        kpts = _points(g["keypoints"], len(boxes), k, what)
        xywh = _xywh(boxes, what)
        areas = np.asarray(g.get("areas", xywh[:, 2] * xywh[:, 3] * 0.53), np.float64).reshape(-1)
        images.append({"id": iid, "width": w, "height": h})
        for b, c, p, a in zip(xywh.tolist(), labels.tolist(), kpts, areas.tolist()):
            labelled = int((p[:, 2] > 0).sum())
            n_gt[c] += labelled > 0
            annotations.append({"id": len(annotations) + 1, "image_id": iid, "category_id": ids[c], "bbox": b,
                                "area": a, "iscrowd": 0, "num_keypoints": labelled,
                                "keypoints": p[:, :3].reshape(-1).tolist()})
    results = []
    for d in predictions:
        iid, what = found_image(d, seen, "predictions")
        scores = _array(d["scores"], np.float64, (), what)
        labels = _labels(d["labels"], len(scores), nc, what, "predictions carry class indices 0..nc-1")
        kpts = _points(d["keypoints"], len(scores), k, what)
        if kpts.shape[-1] == 2:
            kpts = np.concatenate([kpts, np.ones(kpts.shape[:-1] + (1,))], axis=-1)
        results += [{"image_id": iid, "category_id": ids[c], "score": s, "keypoints": p.reshape(-1).tolist()}
                    for s, c, p in zip(scores.tolist(), labels.tolist(), kpts)]
    if not results:
        return empty_result(names, n_gt)
    categories = [{"id": cid, "name": str(n), "keypoints": [str(i) for i in range(k)]} for cid, n in zip(ids, names)]
    dataset = {"images": images, "annotations": annotations, "categories": categories}
    precision, stats = _evaluate(dataset, results, "pycocotools", max_dets, "keypoints", sigmas=sig)
    return summarise(precision, stats, names, ids, n_gt)
