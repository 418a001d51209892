"""COCO mAP in memory: hand-computed cases, the category mapping, empty detections, the two backends."""
import numpy as np
import pytest
import torch

from vision_attn.errors import ConfigError, DataError
from vision_attn.evaluation import coco_map

NAMES = ["cat", "dog", "bird"]
IDS = [1, 2, 3]


def _gt():
    return [{"image_id": 1, "boxes": np.array([[0, 0, 100, 100], [150, 150, 190, 200]], np.float32),
             "labels": np.array([0, 1]), "orig_size": (240, 320)},
            {"image_id": 2, "boxes": np.array([[10, 20, 60, 90]], np.float32), "labels": np.array([2]),
             "orig_size": (120, 160)},
            {"image_id": 3, "boxes": np.zeros((0, 4), np.float32), "labels": np.zeros(0, np.int64),
             "orig_size": (100, 100)}]


def _perfect(gt):
    return [{"image_id": g["image_id"], "boxes": torch.as_tensor(g["boxes"]), "scores": torch.full((len(g["labels"]),), 0.9),
             "labels": torch.as_tensor(g["labels"])} for g in gt]


@pytest.mark.parametrize("backend", ["pycocotools", "faster"])
def test_perfect_detections_give_one(backend):
    r = coco_map(_gt(), _perfect(_gt()), names=NAMES, category_ids=IDS, backend=backend)
    assert r.map == pytest.approx(1.0) and r.map50 == pytest.approx(1.0) and r.map75 == pytest.approx(1.0)
    assert [(n, k) for n, *_, k in r.per_class] == [("cat", 1), ("dog", 1), ("bird", 1)]
    assert "all" in r.table() and r.as_dict()["per_class"]["dog"]["ap"] == pytest.approx(1.0)


def test_shift_with_known_iou_drops_ap_at_the_stricter_thresholds():
    # a 100x100 box shifted 24 px: IoU = 76*100 / (124*100) = 0.6129, so it matches at IoU 0.50, 0.55, 0.60
    # and at none of 0.65..0.95: AP is 1 at 3 of the 10 thresholds -> mAP 0.3, AP50 1, AP75 0
    gt = [{"image_id": 7, "boxes": [[0, 0, 100, 100]], "labels": [0], "orig_size": (200, 200)}]
    det = [{"image_id": 7, "boxes": [[24, 0, 124, 100]], "scores": [0.8], "labels": [0]}]
    r = coco_map(gt, det, names=NAMES, category_ids=IDS)
    assert r.map == pytest.approx(0.3) and r.map50 == pytest.approx(1.0) and r.map75 == 0.0
    # classes without ground truth are NaN in the table and do not count in the mean
    assert np.isnan(r.per_class[1][1]) and r.as_dict()["per_class"]["dog"]["ap"] is None


def test_half_the_boxes_found_gives_51_of_101_recall_points():
    gt = [{"image_id": 1, "boxes": [[0, 0, 10, 10], [50, 50, 60, 60]], "labels": [0, 0], "orig_size": (100, 100)}]
    det = [{"image_id": 1, "boxes": [[0, 0, 10, 10]], "scores": [0.9], "labels": [0]}]
    r = coco_map(gt, det, names=NAMES, category_ids=IDS)
    assert r.map == pytest.approx(51 / 101) and r.map50 == pytest.approx(51 / 101)


def test_category_ids_map_class_indices_whatever_their_order():
    # class 0 has COCO id 7, class 1 id 3: a wrong mapping would swap the per-class rows
    gt = [{"image_id": 1, "boxes": [[0, 0, 10, 10], [50, 50, 60, 60]], "labels": [0, 1], "orig_size": (100, 100)}]
    det = [{"image_id": 1, "boxes": [[0, 0, 10, 10]], "scores": [0.9], "labels": [0]}]
    r = coco_map(gt, det, names=["a", "b"], category_ids=[7, 3])
    assert [(n, ap) for n, ap, *_ in r.per_class] == [("a", pytest.approx(1.0)), ("b", 0.0)]
    assert r.map == pytest.approx(0.5)


@pytest.mark.parametrize("backend", ["pycocotools", "faster"])
def test_max_dets_keeps_the_best_scored_detections_per_image(backend):
    # four confident false positives, then the true box: AP 1 at IoU 0.5 needs all five detections
    gt = [{"image_id": 1, "boxes": [[0, 0, 10, 10]], "labels": [0], "orig_size": (100, 100)}]
    det = [{"image_id": 1, "boxes": [[50, 50, 60, 60]] * 4 + [[0, 0, 10, 10]], "scores": [0.9, 0.8, 0.7, 0.6, 0.5],
            "labels": [0] * 5}]
    # precision 1/5 at recall 1: every one of the 101 recall points interpolates to 0.2
    assert coco_map(gt, det, names=NAMES, category_ids=IDS, backend=backend).map == pytest.approx(0.2)
    assert coco_map(gt, det, names=NAMES, category_ids=IDS, backend=backend, max_dets=4).map == 0.0


def test_empty_detections_give_zero():
    r = coco_map(_gt(), [], names=NAMES, category_ids=IDS)
    assert (r.map, r.map50) == (0.0, 0.0) and all(ap == 0.0 for _, ap, *_ in r.per_class)
    r = coco_map(_gt(), [{"image_id": 1, "boxes": np.zeros((0, 4)), "scores": [], "labels": []}],
                 names=NAMES, category_ids=IDS)
    assert r.map == 0.0


def test_mismatched_category_mapping_is_caught():
    with pytest.raises(ConfigError, match="category_ids has 2 ids but names lists 3"):
        coco_map(_gt(), [], names=NAMES, category_ids=[1, 2])
    with pytest.raises(ConfigError, match="start at 1"):
        coco_map(_gt(), [], names=NAMES, category_ids=[0, 1, 2])
    with pytest.raises(ConfigError, match="repeat"):
        coco_map(_gt(), [], names=NAMES, category_ids=[1, 1, 2])
    bad = _perfect(_gt())
    bad[1]["labels"] = torch.tensor([3])  # a COCO id (or a model with more classes) where an index belongs
    with pytest.raises(DataError, match=r"detections of image_id 2: label 3 is not a class index 0..2"):
        coco_map(_gt(), bad, names=NAMES, category_ids=IDS)
    gt = _gt()
    gt[0]["labels"] = np.array([0, 5])
    with pytest.raises(DataError, match="ground truth of image_id 1: label 5"):
        coco_map(gt, [], names=NAMES, category_ids=IDS)


def test_bad_detection_input_is_named():
    det = _perfect(_gt())
    det[0]["image_id"] = 99
    with pytest.raises(DataError, match="image_id 99: no such image"):
        coco_map(_gt(), det, names=NAMES, category_ids=IDS)
    det = _perfect(_gt())
    det[0]["boxes"] = torch.tensor([[50.0, 50, 10, 10], [0, 0, 1, 1]])  # xywh where xyxy is expected
    with pytest.raises(DataError, match="must be xyxy"):
        coco_map(_gt(), det, names=NAMES, category_ids=IDS)
    det = _perfect(_gt())
    det[0]["scores"] = [0.5]
    with pytest.raises(DataError, match="1 scores for 2 boxes"):
        coco_map(_gt(), det, names=NAMES, category_ids=IDS)


def _random_case(seed, n_images=40, nc=5):
    rng = np.random.default_rng(seed)
    gt, det = [], []
    for i in range(1, n_images + 1):
        n = int(rng.integers(0, 6))
        xy = rng.uniform(0, 200, (n, 2))
        wh = rng.uniform(5, 60, (n, 2))
        boxes = np.concatenate([xy, xy + wh], 1)
        labels = rng.integers(0, nc, n)
        gt.append({"image_id": i, "boxes": boxes, "labels": labels, "orig_size": (260, 260)})
        m = int(rng.integers(0, 10))
        src = rng.integers(0, max(n, 1), m)
        jitter = rng.normal(0, 2, (m, 4))
        dboxes = (boxes[src] if n else rng.uniform(0, 200, (m, 4))) + jitter
        dboxes[:, 2:] = np.maximum(dboxes[:, 2:], dboxes[:, :2] + 1)
        dlabels = np.where(rng.random(m) < 0.8, labels[src] if n else 0, rng.integers(0, nc, m))
        det.append({"image_id": i, "boxes": dboxes, "scores": rng.random(m), "labels": dlabels})
    return gt, det


@pytest.mark.parametrize("seed", [0, 1])
def test_faster_coco_eval_agrees_with_pycocotools(seed):
    gt, det = _random_case(seed)
    names, ids = [str(k) for k in range(5)], [2, 4, 6, 8, 10]
    a = coco_map(gt, det, names=names, category_ids=ids, backend="pycocotools")
    b = coco_map(gt, det, names=names, category_ids=ids, backend="faster")
    assert 0.05 < a.map < 0.95  # a case with something to rank
    assert a.map == pytest.approx(b.map, abs=1e-6) and a.map50 == pytest.approx(b.map50, abs=1e-6)
    assert np.allclose(a.stats, b.stats, atol=1e-6)
    for (_, ap_a, ap50_a, _), (_, ap_b, ap50_b, _) in zip(a.per_class, b.per_class):
        assert ap_a == pytest.approx(ap_b, abs=1e-6) and ap50_a == pytest.approx(ap50_b, abs=1e-6)


def test_unknown_backend_is_a_config_error():
    with pytest.raises(ConfigError, match="choose pycocotools or faster"):
        coco_map(_gt(), _perfect(_gt()), names=NAMES, category_ids=IDS, backend="torchmetrics")


def test_evaluation_and_data_do_not_import_lightning():
    import subprocess
    import sys

    code = ("import sys, vision_attn.evaluation, vision_attn.data; "
            "print(sorted(m for m in sys.modules if 'lightning' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
