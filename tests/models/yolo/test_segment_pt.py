"""ultralytics ``-seg.pt`` files (written by ultralytics' own trainer code, test-only peer) read by our safe
reader: the same tensors, and our segmentation model built from the file gives ultralytics' outputs
(boxes, classes, mask coefficients; prototypes)."""
from __future__ import annotations

import pytest
import torch

from tests.io.ultralytics_files import peer_load, save_like_trainer
from vision_attn.io.ultralytics_pt import read_ultralytics_checkpoint
from vision_attn.models.yolo.from_ultralytics import detector_from_ultralytics
from vision_attn.models.yolo.segment import Segment, Segment26

from .peer_zoo import peer_decoded

SEG_MODELS = ("yolov8n-seg.yaml", "yolo26n-seg.yaml")  # yolo26n-seg: the end-to-end head, Proto26


@pytest.fixture(scope="module")
def seg_files(tmp_path_factory) -> dict[str, tuple]:
    root = tmp_path_factory.mktemp("seg_pt")
    return {name: save_like_trainer(name, root / name.removesuffix(".yaml"), model_class="SegmentationModel")
            for name in SEG_MODELS}


@pytest.mark.parametrize("name", SEG_MODELS)
@pytest.mark.parametrize("which", ["last", "best"])
def test_seg_pt_gives_ultralytics_outputs(name, which, seg_files):
    pt = seg_files[name][0 if which == "last" else 1]
    ckpt = read_ultralytics_checkpoint(pt)
    assert ckpt.model_class == "ultralytics.nn.tasks.SegmentationModel" and ckpt.nc == 3
    peer = peer_load(pt)
    expected = peer.state_dict()
    assert list(ckpt.state_dict) == list(expected)
    for key, value in expected.items():
        torch.testing.assert_close(ckpt.state_dict[key], value, rtol=0, atol=0, msg=key)
    loaded = detector_from_ultralytics(ckpt)
    assert not loaded.reinitialised
    model = loaded.model.eval()
    head = model.model[-1]
    assert isinstance(head, Segment26 if name.startswith("yolo26") else Segment) and head.nc == 3
    x = torch.rand(2, 3, 64, 96, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        pred, protos = model(x)
        (their_pred, their_protos), _ = peer(x)
        if head.has_one2one:  # ultralytics top-k's the one-to-one branch inside its head: compare before that
            their_pred = peer_decoded(peer, x, "one2one")
    assert pred.shape[1] == 4 + 3 + 32 and protos.shape == (2, 32, 16, 24)
    torch.testing.assert_close(pred, their_pred, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(protos, their_protos, rtol=1e-5, atol=1e-4)


def test_class_count_change_also_refits_the_semantic_branch(seg_files):
    _, best = seg_files["yolo26n-seg.yaml"]
    with pytest.warns(UserWarning, match="3 classes in the file, 5 in the model"):
        loaded = detector_from_ultralytics(best, num_classes=5)
    head = len(loaded.model.model) - 1
    class_outputs = {f"model.{head}.{branch}.{i}.2.{p}" for branch in ("cv3", "one2one_cv3") for i in range(3)
                     for p in ("weight", "bias")}
    semantic = {f"model.{head}.proto.semseg.2.{p}" for p in ("weight", "bias")}
    assert set(loaded.reinitialised) == class_outputs | semantic  # the mask coefficients and prototypes kept
