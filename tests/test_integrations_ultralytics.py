"""Our attention rows inside ultralytics' own YAML parser and trainer (ultralytics is AGPL: a test-only
peer, installed by ``make test`` from requirements-test.txt; these tests skip where it is missing)."""
import csv
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from tests.peers import import_ultralytics

ultralytics_tasks = import_ultralytics()

from vision_attn.integrations.ultralytics import BLOCK_NAMES, register  # noqa: E402
from vision_attn.models.features import FeatureModule  # noqa: E402
from vision_attn.models.yolo.backbone import Backbone  # noqa: E402
from vision_attn.models.yolo import build_detector, insert_attention_text  # noqa: E402
from vision_attn.models.yolo.modules import ATTENTION_ROWS  # noqa: E402
from vision_attn.models.yolo.swin import MapSwin  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "models"


def test_every_attention_row_is_registered():
    assert set(BLOCK_NAMES) == set(ATTENTION_ROWS)
    assert set(register()) == set(ATTENTION_ROWS) | {"Backbone"}


SWIN_ULTRALYTICS = """\
nc: 3
scales: {n: [0.33, 0.25, 1024]}
backbone:
  - [-1, 1, Backbone, [swin_tiny_patch4_window7_224, {indices: [1, 2, 3]}]] # 0 maps at strides 8, 16, 32
  - [0, 1, Index, [192, 0]] # 1 ultralytics' Index: channels, then the map
  - [0, 1, Index, [384, 1]] # 2
  - [0, 1, Index, [768, 2]] # 3
  - [-1, 1, SPPF, [1024, 5]] # 4
head:
  - [[1, 2, 4], 1, Detect, [nc]] # 5
"""


def test_backbone_row_builds_in_ultralytics_through_features_only():
    register()
    model = ultralytics_tasks.DetectionModel(yaml.safe_load(SWIN_ULTRALYTICS), verbose=False)
    backbone = model.model[0]
    assert isinstance(backbone, Backbone) and isinstance(backbone.net, FeatureModule)
    assert backbone.channels == [192, 384, 768] and model.stride.tolist() == [8.0, 16.0, 32.0]
    with torch.device("meta"):
        ours = build_detector(SWIN_ULTRALYTICS)  # the same text in vision_attn's builder
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ours.parameters())
    model.eval()
    with torch.no_grad():
        assert model(torch.rand(1, 3, 64, 96))[0].shape == (1, 4 + 3, 8 * 12 + 4 * 6 + 2 * 3)


@pytest.mark.parametrize("scale", ["n", "s"])
def test_cbam_yaml_builds_in_ultralytics(scale):
    register()
    register()  # twice: harmless
    data = yaml.safe_load((CONFIGS / "yolov8-cbam.yaml").read_text())
    data["scale"] = scale
    model = ultralytics_tasks.DetectionModel(data, verbose=False)
    n = sum(p.numel() for p in model.parameters())
    with torch.device("meta"):  # counting only
        ours = build_detector(CONFIGS / "yolov8-cbam.yaml", scale=scale)
    assert n == sum(p.numel() for p in ours.parameters())  # 3,245,112 at n
    model.eval()
    with torch.no_grad():
        assert model(torch.rand(1, 3, 64, 64))[0].shape == (1, 84, 84)


@pytest.mark.parametrize("scale", ["n", "s"])
def test_swin_row_needs_no_channels_in_ultralytics(scale):
    register()
    text = insert_attention_text((CONFIGS / "yolov8.yaml").read_text(), "SwinBlock", after="SPPF",
                                 section="backbone").text
    data = yaml.safe_load(text)
    data["scale"] = scale
    model = ultralytics_tasks.DetectionModel(data, verbose=False)
    swin = model.model[10]
    assert type(swin).__name__ == "SwinBlock" and isinstance(swin.block, MapSwin)
    assert swin.block.channels == {"n": 256, "s": 512}[scale]  # the scaled SPPF output, found by itself
    with torch.device("meta"):
        ours = build_detector(text, scale=scale)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ours.parameters())


def test_checkpoint_round_trip(tmp_path):
    # ultralytics pickles whole models: our classes must be importable by name
    register()
    data = yaml.safe_load((CONFIGS / "yolov8-se.yaml").read_text())
    model = ultralytics_tasks.DetectionModel(data, verbose=False)
    torch.save({"model": model}, tmp_path / "ckpt.pt")
    again = torch.load(tmp_path / "ckpt.pt", weights_only=False)["model"]
    assert type(again.model[3]).__name__ == "SE" and again.model[3].block is not None


TINY_YAML = """\
nc: 2
scales: {n: [0.33, 0.25, 1024]}
backbone:
  - [-1, 1, Conv, [64, 3, 2]] # 0 stride 2
  - [-1, 1, Conv, [128, 3, 2]] # 1 stride 4
  - [-1, 1, C2f, [128, True]] # 2
  - [-1, 1, CBAM, []] # 3
  - [-1, 1, Conv, [256, 3, 2]] # 4 stride 8
  - [-1, 1, SE, []] # 5 (P3)
  - [-1, 1, Conv, [512, 3, 2]] # 6 stride 16
  - [-1, 1, SwinBlock, []] # 7 (P4)
  - [-1, 1, Conv, [1024, 3, 2]] # 8 stride 32 (P5)
head:
  - [[5, 7, 8], 1, Detect, [nc]] # 9
"""


def _tiny_dataset(root: Path, images: int = 4, size: int = 64) -> Path:
    """A YOLO-txt set of red and green rectangles on grey (train = val), and its data YAML."""
    rng = np.random.default_rng(0)
    for i in range(images):
        img = np.full((size, size, 3), 90, np.uint8)
        lines = []
        for cls in (0, 1):
            w, h = (int(v) for v in rng.integers(12, 28, 2))
            x, y = int(rng.integers(0, size - w)), int(rng.integers(0, size - h))
            img[y:y + h, x:x + w] = (220, 40, 40) if cls == 0 else (40, 220, 40)
            lines.append(f"{cls} {(x + w / 2) / size:.6f} {(y + h / 2) / size:.6f} {w / size:.6f} {h / size:.6f}")
        (root / "images").mkdir(parents=True, exist_ok=True)
        (root / "labels").mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(root / "images" / f"{i}.png")
        (root / "labels" / f"{i}.txt").write_text("\n".join(lines) + "\n")
    data = root / "data.yaml"
    data.write_text(yaml.safe_dump({"path": str(root), "train": "images", "val": "images",
                                    "names": {0: "red", 1: "green"}}))
    return data


def test_trains_with_ultralytics_trainer(tmp_path, monkeypatch):
    """register() + ultralytics' own YOLO(...).train: CBAM, SE and SwinBlock rows without channel
    arguments train for an epoch, validate, and save weights that load and run again."""
    import ultralytics.data.utils
    from ultralytics import YOLO

    monkeypatch.setattr(ultralytics.data.utils, "check_font", lambda *a, **k: None)  # plots off: no font download
    threads = torch.get_num_threads()  # the trainer sets its own count for CPU training
    register()
    data = _tiny_dataset(tmp_path / "data")
    (tmp_path / "tiny.yaml").write_text(TINY_YAML)
    model = YOLO(str(tmp_path / "tiny.yaml"))
    initial = {}
    model.add_callback("on_train_start", lambda trainer: initial.update(
        {k: v.detach().clone() for k, v in trainer.model.named_parameters()}))
    try:
        model.train(data=str(data), epochs=1, imgsz=64, batch=2, workers=0, device="cpu", plots=False, val=True,
                    amp=False, deterministic=False, nbs=2, project=str(tmp_path / "runs"), name="tiny", exist_ok=True,
                    verbose=False)
    finally:
        torch.set_num_threads(threads)
    run = tmp_path / "runs" / "tiny"
    with open(run / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and int(float(rows[0]["epoch"])) == 1
    for key in ("train/box_loss", "train/cls_loss", "train/dfl_loss"):
        assert math.isfinite(float(rows[0][key])) and float(rows[0][key]) > 0
    assert "metrics/mAP50(B)" in rows[0]  # validation ran

    trained = YOLO(str(run / "weights" / "last.pt"))
    net = trained.model
    assert [type(net.model[i]).__name__ for i in (3, 5, 7)] == ["CBAM", "SE", "SwinBlock"]
    assert isinstance(net.model[7].block, MapSwin) and net.model[7].block.channels == 128
    with torch.device("meta"):
        fresh = build_detector(TINY_YAML, scale="n")  # the same network as our own builder makes
    assert sum(p.numel() for p in net.parameters()) == sum(p.numel() for p in fresh.parameters())
    # the attention blocks' parameters were in the optimizer: the saved (EMA) weights moved from the start
    saved = dict(net.named_parameters())
    for row in (3, 5, 7):
        keys = [k for k in initial if k.startswith(f"model.{row}.block.")]
        assert keys and any(not torch.equal(initial[k], saved[k].float()) for k in keys), row
    net.float().eval()
    with torch.no_grad():
        out = net(torch.rand(1, 3, 64, 64))[0]
    assert out.shape == (1, 6, 64 + 16 + 4) and torch.isfinite(out).all()
