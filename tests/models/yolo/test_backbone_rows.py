"""Backbone rows (a create_model network's feature maps) and Index rows (one map of them) in YAMLs."""
import json

import pytest
import torch

import vision_attn
from vision_attn.cli import main
from vision_attn.errors import ConfigError
from vision_attn.models.yolo import build_detector, insert_attention_text
from vision_attn.models.yolo.backbone import Backbone

from .conftest import CONFIGS

SWIN_YAML = CONFIGS / "swin-t-yolov8.yaml"


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _meta(yaml, **kw):
    with torch.device("meta"):
        return build_detector(yaml, **kw)


@pytest.fixture(scope="module")
def swin_detector():
    torch.manual_seed(0)
    return build_detector(SWIN_YAML, scale="n", num_classes=3)


def test_swin_yaml_builds_with_known_channels(swin_detector):
    backbone = swin_detector.model[0]
    assert isinstance(backbone, Backbone) and backbone.channels == [192, 384, 768] and backbone.strides == [8, 16, 32]
    assert [row["channels"] for row in swin_detector.info[1:4]] == [192, 384, 768]
    assert swin_detector.info[4]["args"][:2] == [768, 256]  # SPPF after Index 2 receives Swin's 768 channels
    assert swin_detector.stride == [8.0, 16.0, 32.0]


@pytest.mark.parametrize("size", [(128, 128), (96, 160)])
def test_swin_yaml_forward_gives_detect_outputs(swin_detector, size):
    h, w = size
    swin_detector.eval()
    with torch.no_grad():
        out = swin_detector(torch.rand(1, 3, h, w))
    cells = sum((h // s) * (w // s) for s in (8, 16, 32))
    assert out.shape == (1, 4 + 3, cells) and torch.isfinite(out).all()
    swin_detector.train()
    maps = swin_detector(torch.rand(2, 3, h, w))
    assert [tuple(m.shape) for m in maps] == [(2, 64 + 3, h // s, w // s) for s in (8, 16, 32)]


def test_swin_backbone_parameters_are_create_models_without_classifier():
    with torch.device("meta"):
        swin = vision_attn.create_model("swin_tiny_patch4_window7_224")
        plain = Backbone("swin_tiny_patch4_window7_224", {"indices": [1, 2, 3]})
        normed = Backbone("swin_tiny_patch4_window7_224", {"indices": [0, 1, 2, 3], "norm": True})
        early = Backbone("swin_tiny_patch4_window7_224", {"indices": [0, 1]})
    head, norm = _params(swin.head), _params(swin.norm)
    assert _params(normed) == _params(swin) - head == 28_288_354 - 769_000
    assert _params(plain) == _params(swin) - head - norm
    assert _params(early) == _params(swin) - head - norm - _params(swin.layers[2]) - _params(swin.layers[3])
    assert early.channels == [96, 192] and early.strides == [4, 8]
    model = _meta(SWIN_YAML, scale="n")
    assert _params(model.model[0]) == _params(plain)


def test_swin_backbone_maps_are_the_models_stage_outputs(tmp_path):
    torch.manual_seed(0)
    swin = vision_attn.create_model("swin_tiny_patch4_window7_224").eval()
    torch.save(swin.state_dict(), tmp_path / "swin.pth")
    backbone = Backbone("swin_tiny_patch4_window7_224",
                        {"indices": [1, 3], "norm": True, "pretrained": str(tmp_path / "swin.pth")}).eval()
    x = torch.rand(1, 3, 96, 128)
    with torch.no_grad():
        ours = backbone(x)
        ref = swin.forward_intermediates(x, [1, 3], norm=True, intermediates_only=True)
        last = swin.forward_features(x).permute(0, 3, 1, 2)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(ours[-1], last)


VIT_YAML = """\
nc: 2
backbone:
  - [-1, 1, Backbone, [vit_tiny_patch16_224, {indices: [5, 11], norm: true}]] # 0 two maps at stride 16
  - [0, 1, Index, [0]] # 1
  - [-1, 1, nn.Upsample, [None, 2, "nearest"]] # 2 stride 8
  - [0, 1, Index, [192, 1]] # 3 stride 16 (ultralytics' form: channels, index)
  - [-1, 1, Conv, [256, 3, 2]] # 4 stride 32
head:
  - [[2, 3, 4], 1, Detect, [nc]] # 5
"""


def test_vit_backbone_with_a_simple_pyramid():
    torch.manual_seed(0)
    model = build_detector(VIT_YAML).eval()
    assert model.model[0].channels == [192, 192] and model.stride == [8.0, 16.0, 32.0]
    with torch.device("meta"):
        vit = vision_attn.create_model("vit_tiny_patch16_224")
    assert _params(model.model[0]) == _params(vit) - _params(vit.head)  # all 12 blocks and the norm used
    with torch.no_grad():
        out = model(torch.rand(1, 3, 64, 96))
    assert out.shape == (1, 6, 8 * 12 + 4 * 6 + 2 * 3)


RESNET_YAML = """\
nc: 4
backbone:
  - [-1, 1, Backbone, [resnet18, {attention: cbam}]] # 0 layer2..layer4
  - [0, 1, Index, [0]] # 1 stride 8
  - [0, 1, Index, [1]] # 2 stride 16
  - [0, 1, Index, [-1]] # 3 stride 32
  - [-1, 1, CBAM, []] # 4
head:
  - [[1, 2, 4], 1, Detect, [nc]] # 5
"""


def test_resnet_backbone_with_attention():
    model = build_detector(RESNET_YAML).eval()
    backbone = model.model[0]
    assert backbone.channels == [128, 256, 512] and backbone.strides == [8, 16, 32]
    with torch.device("meta"):
        resnet = vision_attn.create_model("resnet18", attention="cbam")
    assert _params(backbone) == _params(resnet) - _params(resnet.fc)
    assert sum(type(m).__name__ == "CBAM" for m in backbone.modules()) == 8  # one per residual block
    with torch.no_grad():
        out = model(torch.rand(1, 3, 64, 64))
    assert out.shape == (1, 8, 64 + 16 + 4)


def test_yaml_info_on_the_swin_yaml(capsys):
    assert main(["yaml", "info", str(SWIN_YAML), "--img-size", "256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    first = out["layers"][0]
    assert first["module"] == "Backbone" and first["params"] == 27_517_818
    assert first["output_shape"] == [[1, 192, 32, 32], [1, 384, 16, 16], [1, 768, 8, 8]]
    assert [layer["output_shape"] for layer in out["layers"][1:4]] == [[1, 192, 32, 32], [1, 384, 16, 16],
                                                                      [1, 768, 8, 8]]
    assert out["layers"][-1]["output_shape"] == [1, 84, 32 * 32 + 16 * 16 + 8 * 8]
    assert out["parameters"] == 30_132_730 and out["scale"] == "n"  # as the YAML's comment says


def test_yaml_info_names_a_bad_backbone_row(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(_swin_text("Backbone, [swin_tiny_patch4_window7_224,", "Backbone, [swin_tiny,"))
    assert main(["yaml", "info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "row 0 (Backbone): unknown model 'swin_tiny': did you mean" in err and "swin_t" in err


def _swin_text(old: str, new: str) -> str:
    text = SWIN_YAML.read_text()
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize("old,new,message", [
    ("Backbone, [swin_tiny_patch4_window7_224,", "Backbone, [swin_tiny_patch4_window7,",
     "row 0 (Backbone): unknown model 'swin_tiny_patch4_window7': did you mean swin_tiny_patch4_window7_224"),
    ("Backbone, [swin_tiny_patch4_window7_224,", "Backbone, [os.system,", "row 0 (Backbone): unknown model 'os.system'"),
    ("{indices: [1, 2, 3]}]]", "{indices: [1, 2, 3], depths: 3}]]", "row 0 (Backbone): Backbone: unknown keyword 'depths'"),
    ("{indices: [1, 2, 3]}]]", "{indices: [1, 2, 7]}]]", "row 0 (Backbone): indices=[1, 2, 7]: 7 is not a feature level"),
    ("[0, 1, Index, [2]]", "[0, 1, Index, [3]]", "row 3 field 'args': index 3 is out of range; the input gives 3 maps"),
    ("[0, 1, Index, [2]]", "[0, 1, Index, [700, 2]]", "row 3 field 'args': map 2 has 768 channels, not 700"),
    ("[0, 1, Index, [2]]", "[0, 1, SE, []]", "row 3 field 'from': row 0 (Backbone) gives a list of feature maps; "
                                            "pick one with an Index row, e.g. [0, 1, Index, [0]]"),
    ("[-1, 1, SPPF, [1024, 5]]", "[-1, 1, Index, [0]]", "row 4 field 'from': Index picks a map of a Backbone row"),
    ("[-1, 1, Backbone,", "[-1, 2, Backbone,", "row 0 field 'repeats': a Backbone row is built once"),
    ("{indices: [1, 2, 3]}]]", "{indices: [1, 2, 3], img_size: 640}]]",
     "row 0 (Backbone): window_size (7, 7) does not divide the configured resolution 160x160 of stage 0"),
])
def test_bad_backbone_rows_name_the_row(old, new, message):
    with pytest.raises(ConfigError) as info:
        _meta(_swin_text(old, new))
    assert message in str(info.value)


def test_attention_after_each_index_row():
    # the editor re-indexes around Backbone/Index rows as around any other: CBAM on each Swin stage map
    result = insert_attention_text(SWIN_YAML.read_text(), "CBAM", after="Index", section="backbone")
    assert result.inserted == [2, 4, 6]
    assert "  - [0, 1, Index, [1]] # 3 (P4) stride 16, 384 channels\n" in result.text
    model = _meta(result.text, scale="n")
    assert [row["channels"] for row in model.info[1:7]] == [192, 192, 384, 384, 768, 768]
    assert model.inputs[-1] == (13, 16, 19) and model.stride == [8.0, 16.0, 32.0]


def test_swin_backbone_configured_for_672():
    with torch.device("meta"):
        backbone = Backbone("swin_tiny_patch4_window7_224", {"img_size": 672})
    assert backbone.net.model.patch_embed.img_size == (672, 672) and backbone.channels == [192, 384, 768]


def test_detectors_saved_before_features_only_still_load():
    """Backbone rows kept the model under ``net.``; now it is ``net.model.`` (a FeatureModule)."""
    torch.manual_seed(0)
    saved = build_detector(VIT_YAML)
    old = {k.replace("model.0.net.model.", "model.0.net."): v for k, v in saved.state_dict().items()}
    assert any(k.startswith("model.0.net.blocks.") for k in old)
    fresh = build_detector(VIT_YAML)
    fresh.load_state_dict(old)
    for key, value in saved.state_dict().items():
        torch.testing.assert_close(fresh.state_dict()[key], value)
