"""Mask mAP (``coco_map(..., iou_type="segm")``) against pycocotools' own ``COCOeval(iouType="segm")`` on
the same masks written as a COCO json: crowd regions, an image without ground truth, a class without
predictions; both backends agree; bad masks are named."""
import contextlib
import io
import json

import numpy as np
import pytest
from pycocotools import mask as coco_mask
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from vision_attn.errors import DataError
from vision_attn.evaluation import coco_map

NAMES, IDS = ["a", "b", "c"], [1, 2, 5]
H, W = 40, 50


def _blob(rng: np.random.Generator) -> np.ndarray:
    m = np.zeros((H, W), np.uint8)
    x, y = rng.integers(0, W - 12), rng.integers(0, H - 12)
    m[y:y + rng.integers(5, 12), x:x + rng.integers(5, 12)] = 1
    m[y + 2:y + 4, x:x + 2] = 0  # not a box: mask IoU differs from box IoU
    return m


def _box(m: np.ndarray) -> list[float]:
    ys, xs = np.nonzero(m)
    return [float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)]


def _case():
    rng = np.random.default_rng(0)
    truth, dets = [], []
    for iid in (1, 2, 3):
        n = 0 if iid == 3 else 3
        masks = [_blob(rng) for _ in range(n)]
        labels = np.array([0, 1, 0][:n])
        crowd = np.array([False, False, True][:n])
        truth.append({"image_id": iid, "orig_size": (H, W), "labels": labels, "iscrowd": crowd,
                      "boxes": np.array([_box(m) for m in masks], np.float32).reshape(-1, 4), "masks":
                      [coco_mask.encode(np.asfortranarray(m)) for m in masks]})
        pred = [np.roll(m, rng.integers(-2, 3), axis=1) for m in masks] + [_blob(rng)]
        dets.append({"image_id": iid, "boxes": np.array([_box(m) for m in pred], np.float32),
                     "scores": rng.random(len(pred)), "labels": np.array([0, 1, 0, 1][:len(pred) - 1] + [0]),
                     "masks": pred})  # arrays here, RLEs in the truth: both forms are taken
    return truth, dets


def _pycocotools(truth, dets) -> list[float]:
    images = [{"id": t["image_id"], "height": H, "width": W} for t in truth]
    anns, results = [], []
    for t in truth:
        for m, lb, c in zip(t["masks"], t["labels"], t["iscrowd"]):
            rle = {"size": m["size"], "counts": m["counts"].decode()}
            anns.append({"id": len(anns) + 1, "image_id": t["image_id"], "category_id": IDS[lb], "iscrowd": int(c),
                         "segmentation": rle, "area": float(coco_mask.area(m)),
                         "bbox": coco_mask.toBbox(m).tolist()})
    for d in dets:
        for m, s, lb in zip(d["masks"], d["scores"], d["labels"]):
            rle = coco_mask.encode(np.asfortranarray(m.astype(np.uint8)))
            results.append({"image_id": d["image_id"], "category_id": IDS[lb], "score": float(s),
                            "segmentation": {"size": rle["size"], "counts": rle["counts"].decode()}})
    doc = json.loads(json.dumps({"images": images, "annotations": anns,
                                 "categories": [{"id": i, "name": n} for i, n in zip(IDS, NAMES)]}))
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = doc
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(json.loads(json.dumps(results))), "segm")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return [float(v) for v in ev.stats[:3]]


@pytest.mark.parametrize("backend", ["pycocotools", "faster"])
def test_mask_map_equals_pycocotools_segm(backend):
    truth, dets = _case()
    ours = coco_map(truth, dets, names=NAMES, category_ids=IDS, backend=backend, iou_type="segm")
    ref = _pycocotools(truth, dets)
    assert ours.stats[:3] == pytest.approx(ref, abs=1e-4)
    assert ours.map == pytest.approx(ref[0], abs=1e-4) and ours.map50 == pytest.approx(ref[1], abs=1e-4)
    assert 0 < ours.map < 1
    by_class = {name: n for name, _, _, n in ours.per_class}
    assert by_class == {"a": 2, "b": 2, "c": 0}  # crowd regions are not counted as objects to find
    boxes = coco_map(truth, dets, names=NAMES, category_ids=IDS, backend=backend)
    assert boxes.map != pytest.approx(ours.map)  # the masks, not their boxes, were compared


def test_bad_masks_are_named():
    truth, dets = _case()
    dets[0]["masks"] = dets[0]["masks"][:2]
    with pytest.raises(DataError, match="detections of image_id 1: 2 masks for 4 boxes"):
        coco_map(truth, dets, names=NAMES, category_ids=IDS, iou_type="segm")
    truth, dets = _case()
    dets[1]["masks"][0] = np.zeros((H, W + 1), np.uint8)
    with pytest.raises(DataError, match=r"a mask of size \[40, 51\] \(height, width\) for an image of \[40, 50\]"):
        coco_map(truth, dets, names=NAMES, category_ids=IDS, iou_type="segm")
    truth, dets = _case()
    del truth[0]["masks"]
    with pytest.raises(DataError, match="ground truth of image_id 1: no 'masks'"):
        coco_map(truth, dets, names=NAMES, category_ids=IDS, iou_type="segm")
