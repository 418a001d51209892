"""Keypoint labels (YOLO kpt_shape rows, COCO keypoints) and YOLO-OBB rows: read as ultralytics reads them,
and every bad row of a set named by file and line in one error (CLI: exit 2)."""
import json

import cv2
import numpy as np
import pytest

from vision_attn.cli import main
from vision_attn.data import open_detection
from vision_attn.data.faults import Faults
from vision_attn.data.rotated import corners_to_xywhr, xywhr_to_corners
from vision_attn.errors import DataError


def _yolo(tmp, labels, extra="kpt_shape: [2, 3]\nflip_idx: [1, 0]\n", size=(40, 80)):
    """A YOLO set of one image per label text (h, w = size), train and val the same images."""
    for i, text in enumerate(labels):
        img = tmp / "images" / "train" / f"{i}.png"
        img.parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(img), np.zeros((*size, 3), np.uint8))
        lab = tmp / "labels" / "train" / f"{i}.txt"
        lab.parent.mkdir(parents=True, exist_ok=True)
        lab.write_text(text)
    (tmp / "data.yaml").write_text(f"path: .\ntrain: images/train\nval: images/train\n{extra}names: [a, b]\n")
    return tmp / "data.yaml"


def test_yolo_keypoints_in_pixels_with_visibility(tmp_path):
    y = _yolo(tmp_path, ["1 0.5 0.5 0.5 0.5 0.25 0.5 2 0.75 0.25 0\n"])
    ds = open_detection(y, keypoints=True)
    assert ds.keypoint_spec.kpt_shape == [2, 3] and ds.keypoint_spec.flip_idx == (1, 0)
    assert ds.keypoint_spec.sigmas == (0.5, 0.5)  # 1/K, as ultralytics for a set that is not COCO's 17 points
    np.testing.assert_allclose(ds.records[0].keypoints, [[[20, 20, 2], [60, 10, 0]]])
    np.testing.assert_allclose(ds.records[0].boxes, [[20, 10, 60, 30]])
    gt = ds.ground_truth()[0]
    np.testing.assert_allclose(gt["areas"], [0.53 * 40 * 20])


def test_two_dims_keypoints_are_visible(tmp_path):
    y = _yolo(tmp_path, ["0 0.5 0.5 0.5 0.5 0.25 0.5 0.75 0.25\n"], extra="kpt_shape: [2, 2]\n")
    ds = open_detection(y, keypoints=True)
    np.testing.assert_allclose(ds.records[0].keypoints[..., 2], [[2, 2]])
    assert ds.keypoint_spec.flip_idx is None


def test_obb_rows_read_to_canonical_xywhr(tmp_path):
    # a 40 x 10 px box turned by 30 degrees about (40, 20) in an 80 x 40 image
    corners = xywhr_to_corners(np.array([[40, 20, 40, 10, np.pi / 6]]))[0]
    row = "1 " + " ".join(f"{v:.6f}" for v in (corners / [80, 40]).reshape(-1)) + "\n"
    ds = open_detection(_yolo(tmp_path, [row], extra=""), obb=True)
    np.testing.assert_allclose(ds.records[0].corners[0], corners, atol=1e-3)
    np.testing.assert_allclose(ds.ground_truth()[0]["rboxes"], [[40, 20, 40, 10, np.pi / 6]], atol=1e-3)
    np.testing.assert_allclose(ds.records[0].boxes[0], [*corners.min(0), *corners.max(0)], atol=1e-3)


def test_canonical_form_is_ultralytics():
    from ultralytics.utils.ops import xyxyxyxy2xywhr

    rng = np.random.default_rng(0)
    boxes = np.c_[rng.uniform(20, 80, (40, 2)), rng.uniform(2, 30, (40, 2)), rng.uniform(-4, 4, 40)]
    corners = xywhr_to_corners(boxes).astype(np.float32)
    np.testing.assert_allclose(corners_to_xywhr(corners), xyxyxyxy2xywhr(corners), atol=1e-5)
    mine = corners_to_xywhr(corners)
    assert (mine[:, 4] >= -np.pi / 4).all() and (mine[:, 4] < 3 * np.pi / 4).all() and (mine[:, 2] >= mine[:, 3]).all()


def test_every_bad_row_named_by_file_and_line(tmp_path):
    y = _yolo(tmp_path, [
        "0 0.5 0.5 0.5 0.5 0.25 0.5 2\n",                      # 8 columns: kpt_shape [2, 3] needs 11
        "0 0.5 0.5 0.5 0.5 0.25 0.5 2 0.75 0.25 3\n",          # visibility 3
        "0 0.5 0.5 0.5 0.5 0.25 0.5 2 0.75 0.25 2\n0 0.5 0.5 0.5 0.5 25 50 2 0.7 0.2 2\n",  # line 2: pixels
    ])
    faults = Faults("collect")
    open_detection(y, keypoints=True, faults=faults)
    found = {(p.path.rsplit("/", 1)[-1], p.where): p.reason for p in faults.problems}
    assert set(found) == {("0.txt", "line 1"), ("1.txt", "line 1"), ("2.txt", "line 2")}
    assert "kpt_shape [2, 3] needs 11" in found[("0.txt", "line 1")]
    assert "visibility 3 is not 0, 1 or 2" in found[("1.txt", "line 1")]
    assert "outside [0, 1]" in found[("2.txt", "line 2")]
    with pytest.raises(DataError, match=r"0\.txt, line 1: 8 columns"):  # without collecting: the first, one line
        open_detection(y, keypoints=True)


def test_bad_obb_rows(tmp_path):
    y = _yolo(tmp_path, ["0 0.1 0.1 0.5 0.1 0.5 0.5\n", "0 0.1 0.1 0.5 0.1 0.5 0.5 0.1 1.7\n"], extra="")
    faults = Faults("collect")
    open_detection(y, obb=True, faults=faults)
    reasons = [p.text() for p in faults.problems]
    assert "0.txt, line 1: 3 point(s) after the class; an oriented box is its 4 corners" in reasons[0]
    assert "1.txt, line 1: coordinates" in reasons[1] and "outside [0, 1]" in reasons[1]


@pytest.mark.parametrize("flip, match", [("[0, 0]", r"flip_idx: \[0, 0\] is not a permutation of 0..1"),
                                         ("[1, 0, 2]", "not a permutation")])
def test_flip_idx_must_be_a_permutation(tmp_path, flip, match):
    y = _yolo(tmp_path, [""], extra=f"kpt_shape: [2, 3]\nflip_idx: {flip}\n")
    with pytest.raises(DataError, match=match) as e:
        open_detection(y, keypoints=True)
    assert str(y) in str(e.value)


def test_cli_data_check_exits_2_naming_file_and_line(tmp_path, capsys):
    y = _yolo(tmp_path, ["0 0.5 0.5 0.5 0.5 0.25 0.5 2 0.75 0.25 5\n"])
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert main(["data", "check", str(y)]) == 2
    out = capsys.readouterr()
    assert "0.txt, line 1: keypoint visibility 5 is not 0, 1 or 2" in out.out + out.err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def _coco_kpts(tmp, annotations, categories=None):
    for name in ("a.png", "b.png"):
        img = tmp / "images" / "train" / name
        img.parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(img), np.zeros((50, 100, 3), np.uint8))
    (tmp / "annotations").mkdir(exist_ok=True)
    doc = {"images": [{"id": 3, "file_name": "a.png", "width": 100, "height": 50},
                      {"id": 4, "file_name": "b.png", "width": 100, "height": 50}], "annotations": annotations,
           "categories": categories or [{"id": 1, "name": "person", "keypoints": ["nose", "left_eye", "right_eye"],
                                         "skeleton": [[1, 2], [1, 3]]}]}
    (tmp / "annotations" / "person_keypoints_train.json").write_text(json.dumps(doc))
    return tmp


def test_coco_keypoints(tmp_path):
    root = _coco_kpts(tmp_path, [{"id": 1, "image_id": 3, "category_id": 1, "bbox": [10, 5, 40, 30], "area": 900,
                                  "num_keypoints": 2, "keypoints": [20, 10, 2, 30, 12, 1, 0, 0, 0]}])
    ds = open_detection(root, keypoints=True)
    spec = ds.keypoint_spec
    assert spec.flip_idx == (0, 2, 1) and spec.skeleton == ((0, 1), (0, 2)) and spec.names[1] == "left_eye"
    np.testing.assert_allclose(ds.records[0].keypoints, [[[20, 10, 2], [30, 12, 1], [0, 0, 0]]])
    np.testing.assert_allclose(ds.ground_truth()[0]["areas"], [900])


def test_coco_keypoint_errors_name_the_annotation(tmp_path):
    anns = [{"id": 1, "image_id": 3, "category_id": 1, "bbox": [10, 5, 40, 30], "num_keypoints": 1,
             "keypoints": [20, 10, 2, 30, 12, 7, 0, 0, 0]},
            {"id": 2, "image_id": 4, "category_id": 1, "bbox": [10, 5, 40, 30], "keypoints": [20, 10, 2]}]
    faults = Faults("collect")
    open_detection(_coco_kpts(tmp_path, anns), keypoints=True, faults=faults)
    texts = [p.text() for p in faults.problems]
    assert "annotations[0]: keypoint visibility 7 is not 0, 1 or 2" in texts[0]
    assert "annotations[1]: keypoints has 3 numbers; the categories name 3 points, so 9" in texts[1]
