"""Our attention rows inside ultralytics' own YAML parser (runs only where ultralytics is installed:
AGPL, so a test-only dependency in a separate environment)."""
from pathlib import Path

import pytest
import torch
import yaml

ultralytics_tasks = pytest.importorskip("ultralytics.nn.tasks")

from vision_attn.integrations.ultralytics import register  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "detect"


@pytest.mark.parametrize("scale", ["n", "s"])
def test_cbam_yaml_builds_in_ultralytics(scale):
    register()
    register()  # twice: harmless
    data = yaml.safe_load((CONFIGS / "yolov8-cbam.yaml").read_text())
    data["scale"] = scale
    model = ultralytics_tasks.DetectionModel(data, verbose=False)
    n = sum(p.numel() for p in model.parameters())
    from vision_attn.models.yolo import build_detector

    ours = build_detector(CONFIGS / "yolov8-cbam.yaml", scale=scale)
    assert n == sum(p.numel() for p in ours.parameters())  # 3,245,112 at n
    model.eval()
    with torch.no_grad():
        assert model(torch.rand(1, 3, 64, 64))[0].shape == (1, 84, 84)


def test_checkpoint_round_trip(tmp_path):
    # ultralytics pickles whole models: our classes must be importable by name
    register()
    data = yaml.safe_load((CONFIGS / "yolov8-se.yaml").read_text())
    model = ultralytics_tasks.DetectionModel(data, verbose=False)
    torch.save({"model": model}, tmp_path / "ckpt.pt")
    again = torch.load(tmp_path / "ckpt.pt", weights_only=False)["model"]
    assert type(again.model[3]).__name__ == "SE" and again.model[3].block is not None
