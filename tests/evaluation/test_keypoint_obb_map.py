"""Keypoint mAP equal to pycocotools' keypoint evaluation run from json files; oriented-box mAP over the exact
rotated IoU (checked against OpenCV's convex intersection and torchvision's box IoU)."""
import contextlib
import io
import json

import cv2
import numpy as np
import pytest
import torch
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from torchvision.ops import box_iou

from vision_attn.data.rotated import xywhr_to_corners
from vision_attn.evaluation import coco_map, keypoint_map, obb_map, rotated_iou

NAMES, IDS = ["a", "b"], [3, 7]  # category ids that are not index + 1


def _pose_case(seed=0, k=5):
    rng = np.random.default_rng(seed)
    gt, pred = [], []
    for iid in range(1, 7):
        n = int(rng.integers(1, 4))
        xy = rng.uniform(10, 90, (n, 2))
        boxes = np.c_[xy - 8, xy + rng.uniform(8, 20, (n, 2))]
        pts = np.concatenate([boxes[:, None, :2] + rng.uniform(0, 16, (n, k, 2)),
                              rng.choice([0, 1, 2], size=(n, k, 1), p=[0.2, 0.2, 0.6]).astype(float)], axis=-1)
        pts[0, :, 2] = 0 if iid == 2 else pts[0, :, 2]  # an instance with no labelled point: ignored, as COCO
        labels = rng.integers(0, 2, n)
        gt.append({"image_id": iid, "boxes": boxes, "labels": labels, "keypoints": pts, "orig_size": (100, 120)})
        if iid == 5:
            continue  # an image without predictions
        m = n + int(rng.integers(0, 2))
        guess = np.concatenate([pts[:, :, :2], boxes[:, None, :2] + 8 + np.zeros((n, k, 2))])[:m]
        guess = guess + rng.normal(0, rng.uniform(0.5, 3), (m, k, 2))
        pred.append({"image_id": iid, "scores": rng.uniform(0.1, 1, m), "labels": np.r_[labels, [1]][:m],
                     "keypoints": torch.tensor(np.concatenate([guess, rng.uniform(0, 1, (m, k, 1))], -1))})
    return gt, pred


def _pycocotools_from_files(tmp_path, gt, pred, sigmas):
    """pycocotools as its users run it: json files written from the same instances, then COCOeval."""
    anns, images, results = [], [], []
    for g in gt:
        images.append({"id": g["image_id"], "height": 100, "width": 120})
        for b, c, p in zip(g["boxes"], g["labels"], g["keypoints"]):
            w, h = b[2] - b[0], b[3] - b[1]
            anns.append({"id": len(anns) + 1, "image_id": g["image_id"], "category_id": IDS[c], "iscrowd": 0,
                         "bbox": [b[0], b[1], w, h], "area": 0.53 * w * h, "num_keypoints": int((p[:, 2] > 0).sum()),
                         "keypoints": p.reshape(-1).tolist()})
    for d in pred:
        for s, c, p in zip(d["scores"], d["labels"], d["keypoints"].numpy()):
            results.append({"image_id": d["image_id"], "category_id": IDS[c], "score": float(s),
                            "keypoints": p.reshape(-1).tolist()})
    (tmp_path / "gt.json").write_text(json.dumps({"images": images, "annotations": anns, "categories": [
        {"id": i, "name": n, "keypoints": [f"p{j}" for j in range(len(sigmas))]} for i, n in zip(IDS, NAMES)]}))
    (tmp_path / "res.json").write_text(json.dumps(results))
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(str(tmp_path / "gt.json"))
        ev = COCOeval(coco, coco.loadRes(str(tmp_path / "res.json")), "keypoints")
        ev.params.kpt_oks_sigmas = np.array(sigmas)
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return ev.stats


@pytest.mark.parametrize("seed, sigmas", [(0, [0.2] * 5), (1, [0.05, 0.1, 0.3, 0.1, 0.05])])
def test_keypoint_map_equals_pycocotools(tmp_path, seed, sigmas):
    gt, pred = _pose_case(seed)
    ours = keypoint_map(gt, pred, names=NAMES, category_ids=IDS, sigmas=sigmas)
    stats = _pycocotools_from_files(tmp_path, gt, pred, sigmas)
    assert 0.05 < stats[0] < 0.95  # neither trivial nor hopeless
    np.testing.assert_allclose([ours.map, ours.map50, ours.map75], stats[:3], atol=1e-12)
    np.testing.assert_allclose(ours.stats, stats, atol=1e-12)


def test_keypoint_map_sigmas_matter_and_shapes_are_checked():
    gt, pred = _pose_case(0)
    tight = keypoint_map(gt, pred, names=NAMES, category_ids=IDS, sigmas=[0.02] * 5)
    loose = keypoint_map(gt, pred, names=NAMES, category_ids=IDS, sigmas=[0.5] * 5)
    assert tight.map < loose.map
    with pytest.raises(Exception, match=r"keypoints of shape \(.*\); give \(\d+, 4, 2 or 3\)"):
        keypoint_map(gt, pred, names=NAMES, category_ids=IDS, sigmas=[0.1] * 4)


def test_rotated_iou_against_an_exact_convex_intersection():
    rng = np.random.default_rng(0)
    a = np.c_[rng.uniform(0, 30, (40, 2)), rng.uniform(1, 20, (40, 2)), rng.uniform(-4, 4, 40)]
    b = np.c_[rng.uniform(0, 30, (30, 2)), rng.uniform(1, 20, (30, 2)), rng.uniform(-4, 4, 30)]
    ours = rotated_iou(a, b)
    ca, cb = xywhr_to_corners(a).astype(np.float32), xywhr_to_corners(b).astype(np.float32)
    ref = np.zeros_like(ours)
    for i in range(len(a)):
        for j in range(len(b)):
            inter = cv2.intersectConvexConvex(ca[i], cb[j])[0]
            ref[i, j] = inter / (a[i, 2] * a[i, 3] + b[j, 2] * b[j, 3] - inter)
    assert (ours > 0).mean() > 0.3
    np.testing.assert_allclose(ours, ref, atol=1e-5)
    # a square and itself turned by 45 degrees: the octagon 8 (sqrt 2 - 1) over 8 - that
    octagon = 8 * (2 ** 0.5 - 1)
    assert rotated_iou([[5, 5, 2, 2, 0]], [[5, 5, 2, 2, np.pi / 4]])[0, 0] == pytest.approx(octagon / (8 - octagon))
    # turned by a quarter (w and h swapped) it is the same box
    assert rotated_iou([[5, 5, 6, 2, 0.3]], [[5, 5, 2, 6, 0.3 + np.pi / 2]])[0, 0] == pytest.approx(1.0)


def test_rotated_iou_of_axis_boxes_is_box_iou():
    rng = np.random.default_rng(1)
    xyxy = np.sort(rng.uniform(0, 40, (25, 2, 2)), axis=1).transpose(0, 2, 1).reshape(-1, 4)[:, [0, 2, 1, 3]]
    r = np.c_[(xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2], np.zeros(25)]
    np.testing.assert_allclose(rotated_iou(r, r[::-1]), box_iou(torch.tensor(xyxy), torch.tensor(xyxy[::-1].copy())),
                               atol=1e-9)


def _obb_case(seed=0):
    rng = np.random.default_rng(seed)
    gt, det = [], []
    for iid in range(1, 6):
        n = int(rng.integers(1, 5))
        r = np.c_[rng.uniform(20, 80, (n, 2)), rng.uniform(5, 30, (n, 2)), rng.uniform(-0.8, 2.3, n)]
        labels = rng.integers(0, 2, n)
        gt.append({"image_id": iid, "rboxes": r, "labels": labels, "orig_size": (100, 100)})
        noisy = r + np.c_[rng.normal(0, 2, (n, 4)), rng.normal(0, 0.15, n)]
        noisy[:, 2:4] = np.abs(noisy[:, 2:4]) + 1
        det.append({"image_id": iid, "rboxes": noisy, "scores": rng.uniform(0, 1, n), "labels": labels})
    return gt, det


def test_obb_map_of_unturned_boxes_is_coco_map():
    gt, det = _obb_case(0)
    for d in (*gt, *det):
        d["rboxes"][:, 4] = 0
        c, wh = d["rboxes"][:, :2], d["rboxes"][:, 2:4]
        d["boxes"] = np.c_[c - wh / 2, c + wh / 2]
    ours = obb_map(gt, det, names=NAMES, category_ids=IDS)
    boxes = coco_map(gt, det, names=NAMES, category_ids=IDS)
    assert 0.1 < boxes.map < 0.9
    np.testing.assert_allclose([ours.map, ours.map50, ours.map75], [boxes.map, boxes.map50, boxes.map75], atol=1e-12)


def test_obb_map_turns_with_the_scene():
    gt, det = _obb_case(1)
    base = obb_map(gt, det, names=NAMES, category_ids=IDS)
    a = 0.7
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    for d in (*gt, *det):  # every box turned by the same angle about the image centre: the same matches
        d["rboxes"] = np.c_[(d["rboxes"][:, :2] - 50) @ rot.T + 50, d["rboxes"][:, 2:4], d["rboxes"][:, 4] + a]
    turned = obb_map(gt, det, names=NAMES, category_ids=IDS)
    assert 0.05 < base.map < 0.95
    np.testing.assert_allclose([turned.map, turned.map50], [base.map, base.map50], atol=1e-9)
    one = obb_map([{"image_id": 1, "rboxes": [[50, 50, 40, 10, 0.5]], "labels": [0], "orig_size": (100, 100)}],
                  [{"image_id": 1, "rboxes": [[50, 50, 40, 10, 0.75]], "scores": [0.9], "labels": [0]}],
                  names=["a"], category_ids=[1])
    iou = rotated_iou([[50, 50, 40, 10, 0.5]], [[50, 50, 40, 10, 0.75]])[0, 0]
    assert 0.55 < iou < 0.7 and one.map50 == pytest.approx(1.0) and one.map75 == pytest.approx(0.0)
