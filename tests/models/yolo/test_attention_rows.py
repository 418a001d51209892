"""Attention rows need no channel arguments and build at every scale."""
import pytest
import torch

from vision_attn.errors import ConfigError
from vision_attn.layers.plugins import CBAM, ECA, CoordAttention, SqueezeExcite, UltralyticsCBAM
from vision_attn.models.yolo import build_detector, load_yaml

from .conftest import CONFIGS


def meta_build(yaml, scale):
    with torch.device("meta"):
        return build_detector(yaml, scale=scale)


def test_cbam_after_each_backbone_c2f_matches_ultralytics():
    # ultralytics 8.4 builds the same re-indexed YAML (with the channel counts written in) at 3,245,112
    model = meta_build(CONFIGS / "yolov8-cbam.yaml", "n")
    assert sum(p.numel() for p in model.parameters()) == 3_245_112
    cbams = [m for m in model.model if isinstance(m, UltralyticsCBAM)]
    assert [m.channel_attention.channels for m in cbams] == [32, 64, 128, 256]
    assert model.inputs[15] == (14, 9) and model.inputs[-1] == (19, 22, 25)


@pytest.mark.parametrize("scale", "nslmx")
def test_cbam_yaml_builds_at_every_scale(scale):
    plain = meta_build(CONFIGS / "yolov8.yaml", scale)
    model = meta_build(CONFIGS / "yolov8-cbam.yaml", scale)
    added = sum(p.numel() for m in model.model if isinstance(m, UltralyticsCBAM) for p in m.parameters())
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in plain.parameters()) + added
    assert model.stride == [8.0, 16.0, 32.0]


@pytest.mark.parametrize("name,cls", [("SE", SqueezeExcite), ("ECA", ECA), ("CoordAtt", CoordAttention),
                                      ("CBAMPaper", CBAM), ("CBAM", UltralyticsCBAM)])
def test_each_attention_row(name, cls):
    data, _ = load_yaml(CONFIGS / "yolov8-cbam.yaml")
    for row in data["backbone"]:
        if row[2] == "CBAM":
            row[2] = name
    model = meta_build(data, "s")
    assert sum(isinstance(m, cls) for m in model.model) == 4


def test_se_config_and_keyword_arguments():
    model = meta_build(CONFIGS / "yolov8-se.yaml", "n")
    assert sum(isinstance(m, SqueezeExcite) for m in model.model) == 4
    data, _ = load_yaml(CONFIGS / "yolov8-se.yaml")
    data["backbone"][12][3] = [{"reduction": 4}]
    model4 = meta_build(data, "n")
    assert model4.model[12].fc1.out_channels == 64 and model.model[12].fc1.out_channels == 16
    data["backbone"][12][3] = [{"act_layer": "os.system"}]  # a string is never looked up as a callable
    with pytest.raises(ConfigError, match="row 12 field 'args'"):
        meta_build(data, "n")
    data["backbone"][12][3] = [8]
    with pytest.raises(ConfigError, match="row 12 field 'args'.*takes its channels from its input"):
        meta_build(data, "n")


def test_ultralytics_cbam_arguments_port():
    # ultralytics writes CBAM rows with a channel count (and kernel size); ours take the input's channels
    data, _ = load_yaml(CONFIGS / "yolov8-cbam.yaml")
    data["backbone"][3][3] = [999, 3]
    model = meta_build(data, "n")
    assert model.model[3].channel_attention.channels == 32
    assert model.model[3].spatial_attention.cv1.kernel_size == (3, 3)


def test_cbam_model_runs_on_cpu():
    model = build_detector(CONFIGS / "yolov8-cbam.yaml", scale="n", num_classes=2).eval()
    with torch.no_grad():
        out = model(torch.rand(1, 3, 64, 64))
    assert out.shape == (1, 6, 84) and torch.isfinite(out).all()


def test_transformer_row():
    from vision_attn.models.yolo.transformer import MapTransformer

    data, _ = load_yaml(CONFIGS / "yolov8.yaml")
    data["backbone"].insert(10, [-1, 1, "TransformerBlock", [{"depth": 2}]])  # after SPPF: re-index the head
    data["head"][1][0], data["head"][-1][0] = [-1, 6], [16, 19, 22]
    data["head"][7][0], data["head"][10][0] = [-1, 13], [-1, 10]
    model = build_detector(data, scale="n", num_classes=2).eval()
    block = model.model[10]
    assert isinstance(block, MapTransformer) and len(block.blocks) == 2 and block.channels == 256
    with torch.no_grad():
        assert model(torch.rand(1, 3, 64, 64)).shape == (1, 6, 84)
