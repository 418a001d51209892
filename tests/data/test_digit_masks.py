"""demo:digit-masks: digit-boxes' images and digits with each digit's ink outline as its mask, in both layouts,
read back to the same masks; the demo name resolves through the cache."""
import filecmp

import cv2
import numpy as np

from vision_attn.data import DEMO_DATASETS, DetectionTransform, digit_boxes, materialise, open_detection
from vision_attn.data.digit_boxes import DigitBoxesConfig, generate_digit_boxes, write_digit_boxes
from vision_attn.data.digit_masks import ink_polygons, write_digit_masks
from vision_attn.data.masks import decode_rle, fill_polygons, mask_boxes

TINY = DigitBoxesConfig(n_train=10, n_val=4, seed=3)


def _iou(a, b):
    return (a & b).sum() / max((a | b).sum(), 1)


def _filled(ink):
    """The ink with its holes filled (what a polygon outline can hold)."""
    out = np.zeros(ink.shape, np.uint8)
    contours, _ = cv2.findContours(ink.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    cv2.drawContours(out, contours, -1, 1, thickness=-1)
    return out


def test_outline_fills_back_to_the_ink():
    cfg = DigitBoxesConfig(n_train=20, n_val=1, seed=1)
    n = 0
    for item in generate_digit_boxes("train", cfg):
        h, w = item.image.shape[:2]
        for box, (ink, x0, y0) in zip(item.boxes, item.inks):
            polys = ink_polygons(ink, x0, y0)
            m = fill_polygons(polys, h, w)
            want = np.zeros((h, w), np.uint8)
            want[y0:y0 + ink.shape[0], x0:x0 + ink.shape[1]] = _filled(ink)
            np.testing.assert_array_equal(m, want)  # exactly the ink pixels, holes filled
            np.testing.assert_array_equal(mask_boxes(m[None])[0], box)  # the digit-boxes box is the mask's
            n += 1
    assert n > 40


def test_same_images_and_boxes_as_digit_boxes(tmp_path):
    boxes_root = write_digit_boxes(tmp_path / "boxes", TINY)
    masks_root = write_digit_masks(tmp_path / "masks", TINY)
    for split in ("train", "val"):
        names = sorted(p.name for p in (boxes_root / "coco" / "images" / split).iterdir())
        _, mismatch, errors = filecmp.cmpfiles(boxes_root / "coco" / "images" / split,
                                               masks_root / "coco" / "images" / split, names, shallow=False)
        assert mismatch == [] and errors == []
        a = open_detection(boxes_root / "coco", split)
        b = open_detection(masks_root / "coco", split, masks=True)
        for ra, rb in zip(a.records, b.records):
            np.testing.assert_array_equal(ra.boxes, rb.boxes)
            np.testing.assert_array_equal(ra.labels, rb.labels)
            assert len(rb.shapes) == len(rb.labels)


def test_both_layouts_read_back_to_the_same_masks(tmp_path):
    root = write_digit_masks(tmp_path / "m", TINY)
    assert (root / "yolo" / "data.yaml").read_text().startswith("# vision_attn demo:digit-masks")
    for split in ("train", "val"):
        coco = open_detection(root, split, fmt="coco", masks=True)
        yolo = open_detection(root, split, fmt="yolo", masks=True)
        assert len(coco) == len(yolo) == (10 if split == "train" else 4)
        ious = []
        gts = coco.ground_truth()
        for rc, ry, gt in zip(coco.records, yolo.records, gts):
            np.testing.assert_array_equal(rc.labels, ry.labels)
            np.testing.assert_allclose(rc.boxes, ry.boxes, atol=0.51)  # YOLO's box: the polygon's, 0.5 px in
            for sc, sy, rle in zip(rc.shapes, ry.shapes, gt["masks"]):
                mc, my = fill_polygons(sc, rc.height, rc.width), fill_polygons(sy, ry.height, ry.width)
                ious.append(_iou(mc, my))
                assert _iou(decode_rle(rle), mc) > 0.6  # pycocotools' rasterisation of the same polygons
        assert min(ious) > 0.9 and np.mean(ious) > 0.99
        # and through the training targets, both layouts give the same masks
        tf = DetectionTransform(160, masks=True, mask_ratio=4)
        coco.transform = yolo.transform = tf
        for i in range(len(coco)):
            tc, ty = coco[i][1], yolo[i][1]
            assert tc["masks"].shape == ty["masks"].shape
            if len(tc["masks"]):
                inter = (tc["masks"] & ty["masks"]).sum().item()
                union = (tc["masks"] | ty["masks"]).sum().item()
                assert inter / union > 0.97


def test_demo_name_resolves_through_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VISION_ATTN_CACHE", str(tmp_path))
    monkeypatch.setattr(digit_boxes, "DEMO_CONFIG", TINY)
    assert "digit-masks" in DEMO_DATASETS
    root = materialise("digit-masks")
    assert root == tmp_path / "digit-masks-v1" and (root / "coco").is_dir() and (root / "yolo").is_dir()
    ds = open_detection("demo:digit-masks", "val", masks=True)
    assert len(ds) == 4 and ds.masks and all(r.shapes is not None for r in ds.records)
    assert open_detection("demo:digit-masks", "val", fmt="yolo", masks=True).masks
    assert not (tmp_path / "digit-boxes-v1").exists()  # digit-boxes untouched
