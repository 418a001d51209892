"""The SwinBlock row: a pair of Swin blocks (regular + shifted windows) on a detector's feature map."""
import pytest
import torch

from vision_attn.cli import main
from vision_attn.errors import ConfigError
from vision_attn.models.yolo import build_detector, insert_attention_text
from vision_attn.models.yolo.swin import MapSwin

from .conftest import CONFIGS


def _swin_yaml(args=None) -> str:
    text = (CONFIGS / "yolov8.yaml").read_text()
    return insert_attention_text(text, "SwinBlock", after="SPPF", section="backbone", args=args).text


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_detector(_swin_yaml(), scale="n", num_classes=2)


def test_swin_row_builds_at_n(model):
    block = model.model[10]
    assert isinstance(block, MapSwin) and block.channels == 256 and len(block.blocks) == 2
    first, second = block.blocks
    assert first.attn.num_heads == 8 and first.shift_size == (0, 0) and second.shift_size == (3, 3)
    assert model.stride == [8.0, 16.0, 32.0] and model.inputs[-1] == (16, 19, 22)


@pytest.mark.parametrize("size", [(160, 160), (128, 96)])
def test_swin_row_forward(model, size):
    h, w = size
    model.eval()
    with torch.no_grad():
        out = model(torch.rand(1, 3, h, w))
    cells = sum((h // s) * (w // s) for s in (8, 16, 32))
    assert out.shape == (1, 6, cells) and torch.isfinite(out).all()


@pytest.mark.parametrize("rule", ["torchvision", "timm"])
def test_swin_row_keeps_shape_off_window_multiples(rule):
    block = MapSwin(32, window_size=7, window_rule=rule).eval()
    for h, w in [(14, 14), (4, 3), (10, 9)]:
        x = torch.randn(2, 32, h, w)
        y = block(x)
        assert y.shape == x.shape and torch.isfinite(y).all()
    with pytest.raises(ConfigError, match="window_rule"):
        MapSwin(32, window_rule="official")


def test_gradients_reach_swin_block(model):
    model.train()
    model.zero_grad()
    outs = model(torch.rand(1, 3, 128, 96))
    sum(o.float().pow(2).mean() for o in (outs if isinstance(outs, (list, tuple)) else [outs])).backward()
    grads = [p.grad for p in model.model[10].parameters()]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert all(g.abs().sum() > 0 for g in grads)
    model.zero_grad()


def test_swin_row_keyword_arguments():
    with torch.device("meta"):
        model = build_detector(_swin_yaml([{"num_heads": 4, "window_size": 5}]), scale="n")
    block = model.model[10]
    assert block.blocks[0].attn.num_heads == 4 and block.blocks[1].window_size == (5, 5)
    assert block.blocks[1].shift_size == (2, 2)
    with pytest.raises(ConfigError, match="row 10.*do not split into 3 heads"):
        with torch.device("meta"):
            build_detector(_swin_yaml([{"num_heads": 3}]), scale="n")


def test_yaml_info_lists_swin_row(tmp_path, capsys):
    path = tmp_path / "yolov8-swin.yaml"
    path.write_text(_swin_yaml())
    assert main(["yaml", "info", str(path), "--scale", "n", "--img-size", "160"]) == 0
    out = capsys.readouterr().out
    assert "SwinBlock" in out and "24 layers" in out
