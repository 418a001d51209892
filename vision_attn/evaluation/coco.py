"""COCO box and mask mAP on per-image box (and mask) lists, built in memory (pycocotools or faster-coco-eval).

``coco_map(ground_truth, detections, names=..., category_ids=...)`` takes, per image,
ground truth ``{image_id, boxes (n, 4) xyxy in original pixels, labels (n,) class indices, orig_size (h, w)}``
and detections ``{image_id, boxes (m, 4) xyxy, scores (m,), labels (m,) class indices}`` (tensors or
arrays; an image missing from ``detections`` has none). Class index ``k`` becomes COCO category
``category_ids[k]``; boxes become ``[x, y, w, h]``; annotations get ids from 1, ``iscrowd`` 0 and their
box area (the traps that silently change COCO's numbers). No detections at all give AP 0 (``loadRes([])``
would raise). ``backend="faster"`` runs faster-coco-eval's C++ evaluator on the same objects and gives the
same numbers. Printing of either library is suppressed.

Ground truth may flag crowd regions (``iscrowd`` (n,) bool: matched but never counted as misses, as
COCO does). Mask AP (``iou_type="segm"``): ground truth and detections also carry ``masks``, one per box,
in original pixels, as COCO RLE dicts or binary (h, w) arrays (encoded here); the annotations' areas
are then the masks'.
"""
from __future__ import annotations

import contextlib
import io
import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

import numpy as np
import torch

from pycocotools import mask as coco_mask

from vision_attn.data.masks import encode_mask
from vision_attn.errors import ConfigError, DataError

__all__ = ["CocoResult", "coco_map", "check_category_mapping", "summarise", "empty_result", "truth_image",
           "found_image"]

Backend = Literal["pycocotools", "faster"]
IouType = Literal["bbox", "segm"]


@dataclass
class CocoResult:
    """COCO box AP: ``map`` (AP@[.5:.95]), ``map50``, ``map75``, and per class ``(name, AP, AP50, n_gt)``
    (AP is NaN for a class without ground truth; such classes do not count in the mean)."""

    map: float
    map50: float
    map75: float
    per_class: list[tuple[str, float, float, int]] = field(default_factory=list)
    stats: list[float] = field(default_factory=list)  # COCOeval's 12 summary numbers (-1: undefined)

    def table(self) -> str:
        """A plain-text table, one row per class and an ``all`` row."""
        width = max([len("class"), *(len(n) for n, *_ in self.per_class)])
        lines = [f"{'class':<{width}}  {'AP50-95':>7}  {'AP50':>7}  {'boxes':>6}"]
        for name, ap, ap50, n in self.per_class:
            fmt = (lambda v: f"{v:7.4f}" if not math.isnan(v) else f"{'-':>7}")
            lines.append(f"{name:<{width}}  {fmt(ap)}  {fmt(ap50)}  {n:>6}")
        total = sum(n for *_, n in self.per_class)
        lines.append(f"{'all':<{width}}  {self.map:7.4f}  {self.map50:7.4f}  {total:>6}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{map, map50, map75, per_class: {name: {ap, ap50, boxes}}}`` (NaN as None)."""
        clean = (lambda v: None if math.isnan(v) else v)
        return {"map": self.map, "map50": self.map50, "map75": self.map75,
                "per_class": {n: {"ap": clean(ap), "ap50": clean(ap50), "boxes": k} for n, ap, ap50, k in self.per_class}}


def check_category_mapping(names: Sequence[str], category_ids: Sequence[int]) -> list[int]:
    """ConfigError unless ``category_ids`` gives one distinct positive COCO id per class name."""
    ids = [int(c) for c in category_ids]
    if len(ids) != len(names):
        raise ConfigError(f"category_ids has {len(ids)} ids but names lists {len(names)} classes; give one COCO "
                          f"category id per class index (the dataset's category_ids)")
    if len(set(ids)) != len(ids):
        raise ConfigError(f"category_ids {ids} repeat an id; each class needs its own COCO category id")
    if min(ids, default=1) < 1:
        raise ConfigError(f"category_ids {ids} contain {min(ids)}; COCO category ids start at 1 (0-based class "
                          f"indices used as ids break the evaluation): use the dataset's category_ids")
    return ids


def _array(value: Any, dtype: Any, shape_tail: tuple[int, ...], what: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().float().cpu().numpy() if value.is_floating_point() else value.cpu().numpy()
    arr = np.asarray(value, dtype=dtype)
    if arr.size == 0:
        return arr.reshape(0, *shape_tail)
    if arr.shape[1:] != shape_tail or arr.ndim != 1 + len(shape_tail):
        raise DataError(f"{what}: shape {tuple(arr.shape)}, expected (n{''.join(f', {d}' for d in shape_tail)})")
    return arr


def _labels(value: Any, n: int, nc: int, what: str, hint: str) -> np.ndarray:
    labels = _array(value, np.int64, (), what)
    if len(labels) != n:
        raise DataError(f"{what}: {len(labels)} labels for {n} boxes")
    bad = labels[(labels < 0) | (labels >= nc)]
    if len(bad):
        raise DataError(f"{what}: label {int(bad[0])} is not a class index 0..{nc - 1}; {hint}")
    return labels


def _xywh(boxes: np.ndarray, what: str) -> np.ndarray:
    if len(boxes) and ((boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1])).any():
        raise DataError(f"{what}: a box has x2 < x1 or y2 < y1; boxes must be xyxy (x1, y1, x2, y2) pixels")
    out = boxes.astype(np.float64)
    out[:, 2:] -= out[:, :2]
    return out


def _rle(mask: Any, size: tuple[int, int], what: str) -> dict[str, Any]:
    """A mask given as a COCO RLE dict (compressed, ``counts`` bytes or str) or a binary (h, w) array ->
    a compressed RLE of the image's size."""
    if isinstance(mask, Mapping):
        rle = {"size": [int(v) for v in mask["size"]], "counts": mask["counts"]}
        if isinstance(rle["counts"], str):
            rle["counts"] = rle["counts"].encode("ascii")
    else:
        array = np.asarray(mask.cpu() if isinstance(mask, torch.Tensor) else mask)
        if array.ndim != 2:
            raise DataError(f"{what}: a mask of shape {array.shape}; give (h, w) binary masks or COCO RLEs")
        rle = encode_mask(array.astype(np.uint8))
    if tuple(rle["size"]) != tuple(size):
        raise DataError(f"{what}: a mask of size {list(rle['size'])} (height, width) for an image of {list(size)}; "
                        "masks are in original image pixels")
    return rle


def _masks(entry: Mapping[str, Any], n: int, size: tuple[int, int], what: str) -> list[dict[str, Any]]:
    masks = entry.get("masks")
    if masks is None:
        raise DataError(f"{what}: no 'masks'; mask mAP (iou_type='segm') needs a mask per box")
    if len(masks) != n:
        raise DataError(f"{what}: {len(masks)} masks for {n} boxes; give one mask per box")
    return [_rle(m, size, what) for m in masks]


def truth_image(g: Mapping[str, Any], seen: set[int]) -> tuple[int, str, tuple[int, int]]:
    """A ground-truth entry's image id (added to ``seen``; a repeat is an error), its name in errors and its
    (h, w)."""
    iid = int(g["image_id"])
    if iid in seen:
        raise DataError(f"ground truth: image_id {iid} appears twice; give each image once")
    seen.add(iid)
    h, w = (int(v) for v in g["orig_size"])
    return iid, f"ground truth of image_id {iid}", (h, w)


def found_image(d: Mapping[str, Any], seen: set[int], kind: str) -> tuple[int, str]:
    """A result entry's image id, which must be among the ground truth's (``seen``), and its name in errors."""
    iid = int(d["image_id"])
    what = f"{kind} of image_id {iid}"
    if iid not in seen:
        raise DataError(f"{what}: no such image in the ground truth; evaluate {kind} of the same images")
    return iid, what


def _build(ground_truth: Sequence[Mapping[str, Any]], detections: Sequence[Mapping[str, Any]],
           names: Sequence[str], ids: list[int], segm: bool = False
           ) -> tuple[dict[str, Any], list[dict[str, Any]], np.ndarray]:
    nc = len(names)
    images, annotations = [], []
    seen: set[int] = set()
    n_gt = np.zeros(nc, np.int64)
    for g in ground_truth:
        iid, what, (h, w) = truth_image(g, seen)
        boxes = _array(g["boxes"], np.float64, (4,), what)
        labels = _labels(g["labels"], len(boxes), nc, what, "labels are class indices (0-based), not category ids")
        crowd = np.asarray(g.get("iscrowd", np.zeros(len(boxes), bool)), bool).reshape(-1)
        if len(crowd) != len(boxes):
            raise DataError(f"{what}: {len(crowd)} iscrowd flags for {len(boxes)} boxes")
        images.append({"id": iid, "width": w, "height": h})
        xywh = _xywh(boxes, what)
        n_gt += np.bincount(labels[~crowd], minlength=nc)
        start = len(annotations) + 1  # annotation ids from 1: an id of 0 silently halves AP
        anns = [{"id": start + j, "image_id": iid, "category_id": ids[c], "bbox": b, "area": b[2] * b[3],
                 "iscrowd": int(k)} for j, (b, c, k) in enumerate(zip(xywh.tolist(), labels.tolist(), crowd.tolist()))]
        if segm:  # the mask's own area, as COCO's annotations state it
            for a, rle in zip(anns, _masks(g, len(boxes), (h, w), what)):
                a["segmentation"], a["area"] = rle, float(coco_mask.area(rle))
        annotations += anns
    sizes = {im["id"]: (im["height"], im["width"]) for im in images}
    results: list[dict[str, Any]] = []
    for d in detections:
        iid, what = found_image(d, seen, "detections")
        boxes = _array(d["boxes"], np.float64, (4,), what)
        scores = _array(d["scores"], np.float64, (), what)
        if len(scores) != len(boxes):
            raise DataError(f"{what}: {len(scores)} scores for {len(boxes)} boxes")
        labels = _labels(d["labels"], len(boxes), nc, what,
                         "detections must carry class indices 0..nc-1 (not COCO category ids); "
                         "check the model's num_classes against the data's names")
        found = [{"image_id": iid, "category_id": ids[c], "bbox": b, "score": s}
                 for b, s, c in zip(_xywh(boxes, what).tolist(), scores.tolist(), labels.tolist())]
        if segm:
            for r, rle in zip(found, _masks(d, len(boxes), sizes[iid], what)):
                r["segmentation"] = rle
        results += found
    categories = [{"id": cid, "name": str(n)} for cid, n in zip(ids, names)]
    return {"images": images, "annotations": annotations, "categories": categories}, results, n_gt


def _evaluate(dataset: dict[str, Any], results: list[dict[str, Any]], backend: Backend,
              max_dets: int, iou_type: str = "bbox", *, sigmas: Sequence[float] | None = None,
              evaluator: Any = None) -> tuple[np.ndarray, list[float]]:
    """COCOeval's precision array (T, R, K, A, M) and its 12 summary numbers (10 for keypoints).
    ``iou_type="keypoints"``: OKS with ``sigmas`` (one per keypoint), ``max_dets`` per image (COCO's 20);
    ``evaluator``: a subclass of pycocotools' COCOeval to run instead (its own IoU)."""
    if evaluator is not None:
        from pycocotools.coco import COCO
        COCOeval = evaluator
    elif backend == "pycocotools":
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    elif backend == "faster":
        try:
            from faster_coco_eval import COCO
            from faster_coco_eval import COCOeval_faster as COCOeval
        except ImportError:
            raise ConfigError("backend='faster' needs faster-coco-eval (pip install faster-coco-eval); "
                              "or use backend='pycocotools'") from None
    else:
        raise ConfigError(f"backend={backend!r}: choose pycocotools or faster")
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = dataset
        gt.createIndex()
        dt = gt.loadRes(results)
        kwargs = {"print_function": lambda *a, **k: None} if backend == "faster" else {}
        ev = COCOeval(gt, dt, iou_type, **kwargs)
        if iou_type == "keypoints":
            ev.params.kpt_oks_sigmas = np.asarray(sigmas, np.float64)
            ev.params.maxDets = [max_dets]
        else:
            ev.params.maxDets = [1, min(10, max_dets), max_dets]  # COCOeval sorts them: keep max_dets last
        ev.evaluate()
        ev.accumulate()
        if iou_type != "keypoints" or max_dets == 20:  # COCOeval's keypoint summary is fixed at 20
            ev.summarize()
    return np.asarray(ev.eval["precision"]), [float(v) for v in getattr(ev, "stats", [])[:12]]


def _mean(p: np.ndarray) -> float:
    valid = p[p > -1]
    return float(valid.mean()) if valid.size else float("nan")


def coco_map(ground_truth: Sequence[Mapping[str, Any]], detections: Sequence[Mapping[str, Any]], *,
             names: Sequence[str], category_ids: Sequence[int], backend: Backend = "pycocotools",
             max_dets: int = 100, iou_type: IouType = "bbox") -> CocoResult:
    """COCO box AP (``iou_type="bbox"``) or mask AP (``"segm"``) of ``detections`` against
    ``ground_truth`` (see the module docstring).

    ``names``/``category_ids``: the data set's classes and their COCO ids; ``max_dets``: detections kept
    per image (by score) for AP, COCO's 100 by default."""
    if iou_type not in ("bbox", "segm"):
        raise ConfigError(f"iou_type={iou_type!r}: choose bbox (boxes) or segm (masks)")
    ids = check_category_mapping(names, category_ids)
    if max_dets < 1:
        raise ConfigError(f"max_dets={max_dets}: give the number of detections per image to keep, at least 1")
    dataset, results, n_gt = _build(ground_truth, detections, names, ids, segm=iou_type == "segm")
    if not results:  # loadRes([]) raises in pycocotools: nothing detected is AP 0 wherever there is ground truth
        return empty_result(names, n_gt)
    precision, stats = _evaluate(dataset, results, backend, max_dets, iou_type)
    return summarise(precision, stats, names, ids, n_gt)


def empty_result(names: Sequence[str], n_gt: np.ndarray) -> CocoResult:
    """The result of no detections: AP 0 for every class with ground truth."""
    per = [(str(n), 0.0 if k else float("nan"), 0.0 if k else float("nan"), int(k)) for n, k in zip(names, n_gt)]
    return CocoResult(0.0, 0.0, 0.0, per, [0.0] * 12)


def summarise(precision: np.ndarray, stats: list[float], names: Sequence[str], ids: list[int],
              n_gt: np.ndarray) -> CocoResult:
    """COCOeval's precision array -> the result per class index and overall (all areas, the largest
    max-dets)."""
    nc = len(names)
    # precision: (10 IoU thresholds, 101 recall points, K categories sorted by id, area ranges, max-dets)
    order = np.argsort(ids)  # COCOeval's category axis follows sorted ids; map it back to class indices
    p = np.empty_like(precision[:, :, :, 0, -1])
    p[:, :, order] = precision[:, :, :, 0, -1]
    per = [(str(names[k]), _mean(p[:, :, k]), _mean(p[0, :, k]), int(n_gt[k])) for k in range(nc)]
    overall = [_mean(p), _mean(p[0]), _mean(p[5])]
    return CocoResult(*(0.0 if math.isnan(v) else v for v in overall), per, stats)
