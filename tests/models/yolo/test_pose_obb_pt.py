"""ultralytics ``-pose.pt`` and ``-obb.pt`` files (written by ultralytics' own trainer code, test-only peer)
read by our safe reader: the same tensors, and our model built from the file gives ultralytics' outputs
(boxes, classes and keypoints or angles)."""
from __future__ import annotations

import pytest
import torch

from tests.io.ultralytics_files import peer_load, save_like_trainer
from vision_attn.io.ultralytics_pt import read_ultralytics_checkpoint
from vision_attn.models.yolo.from_ultralytics import detector_from_ultralytics
from vision_attn.models.yolo.obb import OBB26
from vision_attn.models.yolo.pose import Pose

from .peer_zoo import peer_decoded

CASES = {"yolov8n-pose.yaml": ("PoseModel", Pose), "yolo26n-obb.yaml": ("OBBModel", OBB26)}


@pytest.mark.parametrize("name", CASES)
def test_pose_and_obb_pt_give_ultralytics_outputs(name, tmp_path):
    model_class, head_class = CASES[name]
    _, best = save_like_trainer(name, tmp_path, model_class=model_class)
    ckpt = read_ultralytics_checkpoint(best)
    assert ckpt.model_class == f"ultralytics.nn.tasks.{model_class}" and ckpt.nc == 3
    peer = peer_load(best)
    expected = peer.state_dict()
    assert list(ckpt.state_dict) == list(expected)
    for key, value in expected.items():
        torch.testing.assert_close(ckpt.state_dict[key], value, rtol=0, atol=0, msg=key)
    loaded = detector_from_ultralytics(ckpt)
    assert not loaded.reinitialised
    model = loaded.model.eval()
    head = model.model[-1]
    assert type(head) is head_class and head.nc == 3
    x = torch.rand(2, 3, 64, 96, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        pred = model(x)
        their_pred = peer_decoded(peer, x, "one2one" if head.has_one2one else None)
    extra = 51 if name.endswith("pose.yaml") else 1  # 17 keypoints (x, y, visibility) or one angle
    assert pred.shape == (2, 4 + 3 + extra, 8 * 12 + 4 * 6 + 2 * 3)  # the cells of strides 8, 16 and 32
    torch.testing.assert_close(pred, their_pred, rtol=1e-5, atol=1e-4)
