"""The data half and the model half together: a batch of the built-in keypoint and oriented-box sets (train
augmentation, 64 px), our network on ultralytics' weights and our loss (its batch keys) give ultralytics'
own loss on the same batch's ``targets`` (its ``v8PoseLoss`` / ``v8OBBLoss`` layout) with its model."""
import pytest
import torch

from tests.models.yolo.peer_zoo import peer_dict, peer_yaml, ultralytics_tasks
from tests.peers import import_ultralytics
from vision_attn.data import DetectionTransform, DigitBoxesConfig, collate_detection, open_detection
from vision_attn.data.digit_warps import write_digit_keypoints, write_digit_obb
from vision_attn.losses import detector_loss
from vision_attn.models.yolo import build_detector

from .test_obb_loss import HYP

ul_loss = import_ultralytics("ultralytics.utils.loss")


def digit_batch(tmp_path, task: str):
    config = DigitBoxesConfig(n_train=4, n_val=2, seed=1)
    if task == "pose":
        root = write_digit_keypoints(tmp_path / "kp", config)
        data = open_detection(root, "train", fmt="yolo", keypoints=True,
                              transform=DetectionTransform(64, train=True, degrees=15, hflip=0.5, seed=0, keypoints=True))
    else:
        root = write_digit_obb(tmp_path / "obb", config)
        data = open_detection(root, "train", obb=True,
                              transform=DetectionTransform(64, train=True, degrees=30, seed=0, obb=True))
    return data, collate_detection([data[i] for i in range(4)])


@pytest.mark.parametrize("task", ["pose", "obb"])
def test_our_loss_on_our_batch_equals_ultralytics_on_its_targets(task, tmp_path):
    data, batch = digit_batch(tmp_path, task)
    nc = len(data.names)
    torch.manual_seed(0)
    rel = f"v8/yolov8-{task}.yaml"
    spec = data.keypoint_spec if task == "pose" else None
    if task == "pose":
        peer = ultralytics_tasks.PoseModel(peer_dict(rel, "n"), nc=nc, data_kpt_shape=tuple(spec.kpt_shape), verbose=False)
        peer.kpt_oks_sigmas = torch.tensor(spec.sigmas)  # the set's sigmas, as ultralytics' trainer sets them
    else:
        peer = ultralytics_tasks.OBBModel(peer_dict(rel, "n"), nc=nc, verbose=False)
    peer.args = HYP
    ours = build_detector(peer_yaml(rel), scale="n", num_classes=nc, kpt_shape=spec.kpt_shape if spec else None)
    ours.load_state_dict(peer.state_dict())
    x = batch["images"]
    loss = detector_loss(ours, kpt_sigmas=spec.sigmas if spec else None)
    parts = loss.batch_loss(ours.train()(*loss.network_inputs(x, batch)), batch)
    theirs, _ = (ul_loss.v8PoseLoss if task == "pose" else ul_loss.v8OBBLoss)(peer)(peer.train()(x), batch["targets"])
    assert parts.box > 0 and parts.cls > 0
    torch.testing.assert_close(parts.total * len(x), theirs.sum(), rtol=1e-4, atol=1e-4)
