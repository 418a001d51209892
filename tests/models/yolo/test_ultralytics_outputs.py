"""Outputs equal ultralytics' on the same weights (ultralytics is AGPL, so never a dependency: a
test-only peer that ``make test`` installs from requirements-test.txt; skipped where it is missing)."""
import pytest
import torch

from tests.peers import import_ultralytics
from vision_attn.models.yolo import build_detector

from .conftest import CONFIGS

ultralytics_tasks = import_ultralytics()


@pytest.mark.parametrize("name,scale", [("yolov8", "n"), ("yolo11", "s"), ("yolo11", "m")])
def test_same_outputs_on_ultralytics_weights(name, scale):
    peer = ultralytics_tasks.DetectionModel(f"{name}{scale}.yaml", verbose=False).eval()
    state = peer.state_dict()
    with torch.no_grad():  # random weights and batch-norm statistics, so every tensor matters
        for key, value in state.items():
            if value.is_floating_point() and "dfl" not in key:
                value.copy_(torch.rand_like(value) * 0.2 + (0.9 if "running_var" in key or "bn.weight" in key else -0.1))
    ours = build_detector(CONFIGS / f"{name}.yaml", scale=scale).eval()
    ours.load_state_dict(state, strict=True)  # the same keys and shapes
    x = torch.rand(2, 3, 128, 160)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), peer(x)[0], rtol=1e-5, atol=1e-4)


def test_fused_convolutions_give_ultralytics_fused_outputs():
    """``fuse_conv_bn`` (what ``predict det`` runs) against ultralytics' ``fuse()`` (what its predict
    runs) and our own unfused model, on the same random weights and statistics."""
    from vision_attn.models.yolo.fuse import fuse_conv_bn

    peer = ultralytics_tasks.DetectionModel("yolov8n.yaml", verbose=False).eval()
    with torch.no_grad():
        for key, value in peer.state_dict().items():
            if value.is_floating_point() and "dfl" not in key:
                value.copy_(torch.rand_like(value) * 0.2 + (0.9 if "running_var" in key or "bn.weight" in key else -0.1))
    ours = build_detector(CONFIGS / "yolov8.yaml", scale="n").eval()
    ours.load_state_dict(peer.state_dict(), strict=True)
    x = torch.rand(2, 3, 128, 160)
    with torch.no_grad():
        unfused = ours(x)
        fuse_conv_bn(ours)
        fused, peer_fused = ours(x), peer.fuse(verbose=False)(x)[0]
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in ours.modules())
    torch.testing.assert_close(fused, peer_fused, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(fused, unfused, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="eval-mode"):
        fuse_conv_bn(build_detector(CONFIGS / "yolov8.yaml", scale="n"))
