"""The pose and OBB data modules: validation batches equal to ultralytics' own pipeline on the same YOLO
sets (targets as v8PoseLoss / v8OBBLoss take them), augmented training batches of the same layout."""
import numpy as np
import pytest

from vision_attn.data.digit_boxes import DigitBoxesConfig
from vision_attn.data.digit_warps import write_digit_keypoints, write_digit_obb
from vision_attn.errors import ConfigError
from vision_attn.tasks.obb import OBBDataModule
from vision_attn.tasks.pose import PoseDataModule

TINY = DigitBoxesConfig(n_train=4, n_val=3, seed=4)


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("sets")
    return write_digit_keypoints(root / "kp", TINY), write_digit_obb(root / "obb", TINY)


def _ultralytics_val(task, data_yaml, size):
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset

    data = check_det_dataset(str(data_yaml))
    cfg = get_cfg(overrides={"task": task, "imgsz": size, "mode": "val"})
    return build_yolo_dataset(cfg, data["val"], 1, data, mode="val", rect=False, stride=32)


@pytest.mark.parametrize("kind", ["pose", "obb"])
def test_validation_targets_equal_ultralytics(sets, kind):
    module, root = (PoseDataModule, sets[0]) if kind == "pose" else (OBBDataModule, sets[1])
    dm = module(data=str(root), format="yolo", img_size=64, batch_size=2, eval_batch_size=1, num_workers=0)
    dm.setup("fit")
    theirs = _ultralytics_val(kind, root / "yolo" / "data.yaml", 64)
    for i, batch in enumerate(dm.val_dataloader()):
        ours, ref = batch["targets"], theirs[i]
        np.testing.assert_allclose(ours["cls"].numpy(), ref["cls"].numpy())
        np.testing.assert_allclose(ours["bboxes"].numpy(), ref["bboxes"].numpy(), atol=2e-3)
        if kind == "pose":
            np.testing.assert_allclose(ours["keypoints"].numpy(), ref["keypoints"].numpy(), atol=2e-3)
    assert i == 2


def test_training_batches_and_their_layout(sets):
    dm = PoseDataModule(data=str(sets[0]), format="coco", img_size=64, batch_size=4, num_workers=0, degrees=15,
                        hflip=0.5)
    dm.setup("fit")
    assert dm.keypoint_spec.kpt_shape == [4, 3] and dm.keypoint_spec.flip_idx == (1, 0, 3, 2)
    batch = next(iter(dm.train_dataloader()))
    t = batch["targets"]
    n = sum(len(b) for b in batch["boxes"])
    assert t["keypoints"].shape == (n, 4, 3) and t["bboxes"].shape == (n, 4) and t["batch_idx"].shape == (n,)
    assert 0 <= float(t["keypoints"][..., :2].min()) and float(t["keypoints"][..., :2].max()) <= 1
    gt = dm.ground_truth()
    assert gt[0]["keypoints"].shape[1:] == (4, 3) and len(gt[0]["areas"]) == len(gt[0]["boxes"])
    obb = OBBDataModule(data=str(sets[1]), img_size=64, batch_size=4, num_workers=0, degrees=30)
    obb.setup("fit")
    batch = next(iter(obb.train_dataloader()))
    r = batch["targets"]["bboxes"]
    assert r.shape == (sum(len(b) for b in batch["boxes"]), 5) and bool((r[:, 4] < 3 * np.pi / 4).all())
    assert obb.ground_truth()[0]["rboxes"].shape[1] == 5


def test_hflip_needs_flip_idx(sets, tmp_path):
    text = (sets[0] / "yolo" / "data.yaml").read_text().replace("flip_idx: [1, 0, 3, 2]\n", "")
    (tmp_path / "data.yaml").write_text(text)
    dm = PoseDataModule(data=str(tmp_path / "data.yaml"), img_size=64, batch_size=2, num_workers=0, hflip=0.5)
    with pytest.raises(ConfigError, match="data.hflip=0.5 with keypoints needs their flip_idx"):
        dm.setup("fit")
