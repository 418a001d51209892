"""demo:digit-keypoints and demo:digit-obb: warped digits whose corners sit on their ink, the same in both
layouts, generated deterministically."""
import numpy as np

from vision_attn.data import DEMO_DATASETS, DetectionTransform, collate_detection, open_detection
from vision_attn.data.digit_boxes import DigitBoxesConfig
from vision_attn.data.digit_warps import generate_warped_digits, write_digit_keypoints, write_digit_obb

TINY = DigitBoxesConfig(n_train=6, n_val=3, seed=5)


def test_corners_enclose_the_ink_tightly():
    cfg = DigitBoxesConfig(n_train=8, n_val=1, seed=2)
    n = 0
    for kind in ("keypoints", "obb"):
        for item in generate_warped_digits("train", kind, cfg):
            for c, ink, box in zip(item.corners.astype(np.float64), item.inks, item.boxes):
                ys, xs = np.nonzero(ink)
                centres = np.c_[xs, ys] + 0.5
                cross = []
                for p, q in zip(c, np.roll(c, -1, axis=0)):
                    e = q - p
                    cross.append((e[0] * (centres[:, 1] - p[1]) - e[1] * (centres[:, 0] - p[0])) / np.hypot(*e))
                    t = np.clip((centres - p) @ e / (e @ e), 0, 1)
                    # the upright ink box is tight: the ink reaches each side of the warped one
                    assert np.linalg.norm(centres - (p + t[:, None] * e), axis=1).min() < 1.5
                assert (np.stack(cross) > -1.0).all()  # and every ink pixel lies inside it (clockwise, y down)
                np.testing.assert_allclose(box, [*c.min(0), *c.max(0)], atol=1e-3)
                n += 1
    assert n > 20


def test_generation_is_deterministic():
    a = list(generate_warped_digits("val", "obb", TINY))
    b = list(generate_warped_digits("val", "obb", TINY))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.image, y.image)
        np.testing.assert_array_equal(x.corners, y.corners)


def test_keypoint_layouts_read_back_alike_and_train(tmp_path):
    root = write_digit_keypoints(tmp_path / "kp", TINY)
    yolo = open_detection(root, "val", fmt="yolo", keypoints=True)
    coco = open_detection(root, "val", fmt="coco", keypoints=True)
    assert yolo.keypoint_spec.flip_idx == coco.keypoint_spec.flip_idx == (1, 0, 3, 2)
    assert yolo.keypoint_spec.names == coco.keypoint_spec.names == ("top_left", "top_right", "bottom_right",
                                                                    "bottom_left")
    for gy, gc in zip(yolo.ground_truth(), coco.ground_truth()):
        np.testing.assert_allclose(gy["keypoints"], gc["keypoints"], atol=2e-3 * 160)
        np.testing.assert_allclose(gy["areas"], gc["areas"], rtol=1e-3)
    yolo.transform = DetectionTransform(64, train=True, hflip=0.5, degrees=10, seed=0, keypoints=True)
    batch = collate_detection([yolo[i] for i in range(len(yolo))])
    assert batch["targets"]["keypoints"].shape[1:] == (4, 3)


def test_obb_set_reads_its_rotated_digits(tmp_path):
    root = write_digit_obb(tmp_path / "obb", TINY)
    ds = open_detection(root, "train", obb=True)
    items = list(generate_warped_digits("train", "obb", TINY))
    for rec, item in zip(ds.records, items):
        np.testing.assert_allclose(rec.corners, item.corners, atol=2e-3 * 160)
    assert {"digit-keypoints", "digit-obb"} <= set(DEMO_DATASETS)


def test_demo_names_resolve_through_the_cache_and_check(tmp_path, monkeypatch):
    from vision_attn.data import check_data, digit_boxes

    monkeypatch.setenv("VISION_ATTN_CACHE", str(tmp_path))
    monkeypatch.setattr(digit_boxes, "DEMO_CONFIG", TINY)
    kp = open_detection("demo:digit-keypoints", "val", keypoints=True)
    assert (tmp_path / "digit-keypoints-v1" / "coco").is_dir() and kp.keypoint_spec.num == 4 and len(kp) == 3
    assert open_detection("demo:digit-obb", "val", obb=True).obb
    report = check_data("demo:digit-keypoints")
    assert report.ok and report.task == "det" and report.splits == {"train": 6, "val": 3}
