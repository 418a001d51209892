"""demo:digit-boxes: determinism, tight ink boxes, the scan split, both layouts, the demo cache."""
import filecmp
import json

import numpy as np
import pytest

from vision_attn.data import digit_boxes, materialise, open_detection, resolve_root
from vision_attn.data.digit_boxes import (
    DigitBoxesConfig,
    generate_digit_boxes,
    write_digit_boxes,
)
from vision_attn.errors import ConfigError

TINY = DigitBoxesConfig(n_train=8, n_val=4, seed=3)


def _files(root):
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file() and p.name != "data.yaml")


def test_same_seed_same_bytes_other_seed_other_images(tmp_path):
    a = write_digit_boxes(tmp_path / "a", TINY)
    b = write_digit_boxes(tmp_path / "b", TINY)
    files = _files(a)
    assert len([f for f in files if f.suffix == ".png"]) == 2 * (8 + 4)  # coco and yolo copies
    assert files == _files(b)
    _, mismatch, errors = filecmp.cmpfiles(a, b, [str(f) for f in files], shallow=False)
    assert mismatch == [] and errors == []
    c = write_digit_boxes(tmp_path / "c", DigitBoxesConfig(n_train=8, n_val=4, seed=4))
    assert not filecmp.cmp(a / "coco/images/train/000001.png", c / "coco/images/train/000001.png", shallow=False)


def test_boxes_are_the_tight_box_of_the_ink():
    # one digit per image on a noiseless background: every edge row/column of the box holds ink (alpha >=
    # 0.25, i.e. at least a quarter of the digit's full contrast), and nothing outside the box does
    cfg = DigitBoxesConfig(n_train=12, n_val=1, max_digits=1, empty_fraction=0.0, noise=0.0, seed=1)
    for item in generate_digit_boxes("train", cfg):
        (x0, y0, x1, y1), = item.boxes.astype(int)
        img = item.image.astype(float)
        background = np.median(np.concatenate([img[0], img[-1]]), axis=0)  # the corners' colour
        diff = np.abs(img - background).max(axis=2)
        contrast = diff.max()
        ink = diff >= 0.25 * contrast - 1.5
        assert ink[y0:y1, x0].any() and ink[y0:y1, x1 - 1].any() and ink[y0, x0:x1].any() and ink[y1 - 1, x0:x1].any()
        outside = diff.copy()
        outside[y0:y1, x0:x1] = 0
        assert outside.max() < 0.25 * contrast + 1.5
        assert (x1 - x0) < 1.2 * 48 + 1 and 16 <= y1 - y0 <= 48


def test_val_uses_only_held_out_scans(monkeypatch):
    scans, digits = digit_boxes.digit_scans()
    blank = scans.copy()
    blank[digit_boxes.TRAIN_SCANS:] = 0  # val scans without ink: if val used them, it would have no boxes
    monkeypatch.setattr(digit_boxes, "digit_scans", lambda: (blank, digits))
    cfg = DigitBoxesConfig(n_train=10, n_val=10, empty_fraction=0.0)
    assert all(len(item.boxes) == 0 for item in generate_digit_boxes("val", cfg))
    assert all(len(item.boxes) > 0 for item in generate_digit_boxes("train", cfg))
    blank = scans.copy()
    blank[:digit_boxes.TRAIN_SCANS] = 0
    monkeypatch.setattr(digit_boxes, "digit_scans", lambda: (blank, digits))
    assert all(len(item.boxes) == 0 for item in generate_digit_boxes("train", cfg))


def test_overlap_count_and_negatives_follow_the_config():
    cfg = DigitBoxesConfig(n_train=60, n_val=1, max_digits=6, max_iou=0.1, empty_fraction=0.2, seed=0)
    items = list(generate_digit_boxes("train", cfg))
    counts = [len(i.boxes) for i in items]
    assert max(counts) <= 6 and 4 <= counts.count(0) <= 24
    for item in items:
        b = item.boxes
        for i in range(len(b)):
            for j in range(i):
                lt, rb = np.maximum(b[i, :2], b[j, :2]), np.minimum(b[i, 2:], b[j, 2:])
                inter = np.prod(np.clip(rb - lt, 0, None))
                union = np.prod(b[i, 2:] - b[i, :2]) + np.prod(b[j, 2:] - b[j, :2]) - inter
                assert inter / union <= 0.1 + 1e-6
        h, w = item.image.shape[:2]
        assert (h, w) in digit_boxes.CANVAS_SIZES and (b[:, 2] <= w).all() and (b[:, 3] <= h).all()


def test_coco_and_yolo_layouts_give_the_same_boxes(tmp_path):
    root = write_digit_boxes(tmp_path / "d", TINY)
    for split in ("train", "val"):
        coco = open_detection(root, split)
        yolo = open_detection(root / "yolo" / "data.yaml", split)
        assert type(coco).__name__ == "CocoDetection" and type(yolo).__name__ == "YoloDetection"
        assert coco.names == yolo.names == [str(i) for i in range(10)]
        assert coco.category_ids == yolo.category_ids == list(range(1, 11))
        assert len(coco) == len(yolo) == (8 if split == "train" else 4)
        for rc, ry in zip(coco.records, yolo.records):
            assert rc.path.name == ry.path.name and rc.image_id == ry.image_id
            assert (rc.height, rc.width) == (ry.height, ry.width)
            np.testing.assert_array_equal(rc.labels, ry.labels)
            np.testing.assert_allclose(rc.boxes, ry.boxes, atol=1e-3)  # 6 decimals of a normalised value
        assert coco.stats.clipped == yolo.stats.clipped == 0 and coco.stats.boxes == yolo.stats.boxes
    doc = json.loads((root / "coco/annotations/instances_train.json").read_text())
    assert min(a["id"] for a in doc["annotations"]) == 1 and {c["id"] for c in doc["categories"]} == set(range(1, 11))
    assert (root / "coco/images/train/000001.png").read_bytes() == (root / "yolo/images/train/000001.png").read_bytes()


def test_demo_name_resolves_through_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VISION_ATTN_CACHE", str(tmp_path))
    monkeypatch.setattr(digit_boxes, "DEMO_CONFIG", TINY)
    root = resolve_root("demo:digit-boxes")
    assert root == tmp_path / "digit-boxes-v1" and (root / "coco").is_dir() and (root / "yolo/data.yaml").is_file()
    assert f"path: {root / 'yolo'}" in (root / "yolo/data.yaml").read_text()  # the final folder, not the temporary one
    assert [p.name for p in tmp_path.iterdir()] == ["digit-boxes-v1"]
    mtime = (root / "coco").stat().st_mtime_ns
    assert materialise("digit-boxes") == root and (root / "coco").stat().st_mtime_ns == mtime
    assert len(open_detection("demo:digit-boxes", "val")) == 4
    assert len(open_detection("demo:digit-boxes", "train", fmt="yolo")) == 8


def test_bad_configuration_is_a_config_error():
    with pytest.raises(ConfigError, match="min_size=40, max_size=20"):
        next(generate_digit_boxes("train", DigitBoxesConfig(min_size=40, max_size=20)))
    with pytest.raises(ConfigError, match="choose 'train' or 'val'"):
        next(generate_digit_boxes("test", TINY))
