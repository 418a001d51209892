"""A DINOv3 ViT as a detector's backbone: the Backbone row over vit_small_patch16_dinov3, ViTDet's
SimpleFeaturePyramid row, the YOLOv8 Detect head (configs/models/dinov3-vits16-sfp.yaml); a timm file
loaded into the row; a training step through `train det`."""
import json

import pytest
import timm
import torch

import vision_attn
from vision_attn.cli import main
from vision_attn.data import DigitBoxesConfig, write_digit_boxes
from vision_attn.errors import ConfigError
from vision_attn.models.yolo import build_detector
from vision_attn.models.yolo.pyramid import SimpleFeaturePyramid
from vision_attn.tasks.detect.run import load_detector
from vision_attn.tasks.runs import lightning_weights

from tests._configs import tiny_detection

from .conftest import CONFIGS

SFP_YAML = CONFIGS / "dinov3-vits16-sfp.yaml"
ROW = "{norm: true}"


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _text(keywords: str) -> str:
    text = SFP_YAML.read_text()
    assert ROW in text
    return text.replace(ROW, f"{{norm: true, {keywords}}}", 1)


def test_shipped_yaml_uses_the_whole_vit_and_gives_three_strides():
    with torch.device("meta"):
        model = build_detector(SFP_YAML, num_classes=10)
        vit = vision_attn.create_model("vit_small_patch16_dinov3")
    assert _params(model.model[0]) == _params(vit) == 21_586_944  # no head: every block and the norm kept
    assert model.model[0].channels == [384] and model.model[0].strides == [16]
    assert model.model[2].channels == [128, 128, 128] and model.stride == [8.0, 16.0, 32.0]


@pytest.mark.parametrize("size", [(64, 64), (64, 96)])
def test_depth_two_detector_outputs_detect_shapes(size):
    torch.manual_seed(0)
    model = build_detector(_text("depth: 2"), num_classes=3).eval()
    assert len(model.model[0].net.model.blocks) == 2
    h, w = size
    with torch.no_grad():
        maps = model.forward_rows(torch.rand(2, 3, h, w), upto=len(model.model) - 1)
        out = model(torch.rand(2, 3, h, w))
    assert maps[1].shape == (2, 384, h // 16, w // 16)  # patch tokens only: class and 4 registers dropped
    assert [tuple(m.shape) for m in maps[2]] == [(2, 128, h // s, w // s) for s in (8, 16, 32)]
    assert out.shape == (2, 4 + 3, sum((h // s) * (w // s) for s in (8, 16, 32)))


def test_timm_dinov3_file_loads_into_the_backbone_row(tmp_path):
    torch.manual_seed(0)
    peer = timm.create_model("vit_small_patch16_dinov3", depth=2).eval()  # random weights, as timm saves them
    torch.save(peer.state_dict(), tmp_path / "dinov3_s16.pth")
    model = build_detector(_text(f"depth: 2, pretrained: {tmp_path / 'dinov3_s16.pth'}"), num_classes=3).eval()
    ours = model.model[0].net.model.state_dict()
    theirs = peer.state_dict()
    assert set(ours) == set(theirs)  # every key mapped, none left over
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
    x = torch.rand(1, 3, 64, 96)
    with torch.no_grad():
        (expected,) = peer.forward_intermediates(x, indices=[1], norm=True, intermediates_only=True)
        got = model.forward_rows(x, upto=2)[1]
    assert got.shape == expected.shape == (1, 384, 4, 6)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_pyramid_levels_resample_as_vitdet():
    sfp = SimpleFeaturePyramid(16, 8, [4.0, 2.0, 1.0, 0.5]).eval()
    with torch.no_grad():
        maps = sfp(torch.rand(1, 16, 6, 4))
    assert [tuple(m.shape) for m in maps] == [(1, 8, 24, 16), (1, 8, 12, 8), (1, 8, 6, 4), (1, 8, 3, 2)]
    assert sfp.stages[0][0].out_channels == 8 and sfp.stages[0][3].out_channels == 4  # C/2 then C/4


@pytest.mark.parametrize("old,new,message", [
    ("[128, [2.0, 1.0, 0.5]]", "[128, [3.0, 1.0]]",
     "row 2 (SimpleFeaturePyramid): SimpleFeaturePyramid: scales=[3.0, 1.0]: give distinct scales of [4.0, 2.0, 1.0, 0.5]"),
    ("[128, [2.0, 1.0, 0.5]]", "[wide]", "row 2 field 'args': ['wide']: a SimpleFeaturePyramid row takes [channels]"),
    ("[-1, 1, SimpleFeaturePyramid,", "[0, 1, SimpleFeaturePyramid,",
     "row 2 field 'from': row 0 (Backbone) gives a list of feature maps; pick one with an Index row"),
    ("[[3, 4, 5], 1, Detect", "[[2, 4, 5], 1, Detect",
     "row 6 field 'from': row 2 (SimpleFeaturePyramid) gives a list of feature maps"),
])
def test_bad_pyramid_rows_name_the_row(old, new, message):
    text = SFP_YAML.read_text()
    assert old in text
    with pytest.raises(ConfigError) as info, torch.device("meta"):
        build_detector(text.replace(old, new, 1))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_train_det_one_step_from_a_timm_file_then_the_run_loads_without_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    root = write_digit_boxes(tmp_path / "data", DigitBoxesConfig(n_train=8, n_val=4, seed=1))
    torch.save(timm.create_model("vit_small_patch16_dinov3", depth=1).state_dict(), tmp_path / "vit.pth")
    (tmp_path / "net.yaml").write_text(_text("depth: 1, pretrained: vit.pth"))
    (tmp_path / "tiny.yaml").write_text(tiny_detection(tmp_path / "net.yaml", root))  # train det's tiny run
    assert main(["train", "det", "--config", str(tmp_path / "tiny.yaml"), "--model.scale", "null",
                 "--model.optimizer", "adamw", "--model.backbone_lr_scale", "0.1", "--trainer.max_epochs", "1"]) == 0
    assert "final val mAP@.5:" in capsys.readouterr().out
    run = tmp_path / "runs" / "tiny"
    m = json.loads((run / "metrics.json").read_text())
    assert m["epochs"] == 1 and m["global_step"] == 1 and m["val_images"] == 4
    assert 0 <= m["val_map"] <= m["val_map50"] <= 1 and m["params"] > 2e6 and m["gflops"] > 0
    (tmp_path / "vit.pth").unlink()  # the run's own weights replace the file's when it is rebuilt
    detector = load_detector(run / "last.ckpt").model
    saved = lightning_weights(torch.load(run / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"])
    assert all(torch.equal(v, saved[k]) for k, v in detector.state_dict().items())
