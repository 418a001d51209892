"""Parameter counts equal ultralytics 8.4's on the same layouts; FLOPs close to its figures."""
import pytest
import torch

from vision_attn.analysis import count_flops
from vision_attn.models.yolo import build_detector

from .conftest import CONFIGS

# ultralytics 8.4.190's counts (nc 80), the same as the comments of its yolov8.yaml / yolo11.yaml
PARAMS = {
    ("yolov8", "n"): 3_157_200, ("yolov8", "s"): 11_166_560, ("yolov8", "m"): 25_902_640,
    ("yolov8", "l"): 43_691_520, ("yolov8", "x"): 68_229_648,
    ("yolo11", "n"): 2_624_080, ("yolo11", "s"): 9_458_752, ("yolo11", "m"): 20_114_688,
    ("yolo11", "l"): 25_372_160, ("yolo11", "x"): 56_966_176,
}


def meta_build(name: str, scale: str, **kw):
    with torch.device("meta"):
        return build_detector(CONFIGS / f"{name}.yaml", scale=scale, **kw)


@pytest.mark.parametrize("name,scale", list(PARAMS))
def test_parameter_parity(name, scale):
    model = meta_build(name, scale)
    assert sum(p.numel() for p in model.parameters()) == PARAMS[(name, scale)]
    assert model.stride == [8.0, 16.0, 32.0]


def test_scale_from_file_name(tmp_path):
    text = (CONFIGS / "yolov8.yaml").read_text()
    (tmp_path / "yolov8.yaml").write_text(text)
    with torch.device("meta"):
        s = build_detector(tmp_path / "yolov8s.yaml")  # ultralytics' naming: the letter picks the scale
    assert s.scale == "s" and sum(p.numel() for p in s.parameters()) == 11_166_560


def test_num_classes_override():
    model = meta_build("yolov8", "n", num_classes=3)
    assert model.nc == 3 and model.model[-1].nc == 3


# ultralytics 8.4.190's get_flops at 640 (thop), unrounded; it prints 8.9, 28.8 and 6.7
ULTRALYTICS_GFLOPS = {("yolov8", "n"): 8.8550912, ("yolov8", "s"): 28.8119296, ("yolo11", "n"): 6.6733184}


@pytest.mark.parametrize("name,scale", list(ULTRALYTICS_GFLOPS))
def test_gflops_close_to_ultralytics(name, scale):
    # we count convolutions and matrix products (2 FLOPs per MAC); thop also counts batch norm and
    # upsampling (and not the attention products): we read 8.744, 28.603 and 6.543
    report = count_flops(meta_build(name, scale), 640)
    reference = ULTRALYTICS_GFLOPS[(name, scale)]
    assert abs(report.gflops - reference) / reference < 0.02, report.gflops


def test_forward_shapes_cpu():
    model = build_detector(CONFIGS / "yolov8.yaml", scale="n", num_classes=5).eval()
    with torch.no_grad():
        out = model(torch.rand(1, 3, 64, 96))
    assert out.shape == (1, 4 + 5, 8 * 12 + 4 * 6 + 2 * 3)
    assert torch.all((out[:, 4:] >= 0) & (out[:, 4:] <= 1))
    model.train()
    raw = model(torch.rand(2, 3, 64, 64))
    assert [tuple(r.shape) for r in raw] == [(2, 64 + 5, 8, 8), (2, 69, 4, 4), (2, 69, 2, 2)]


def test_input_channels_key():
    text = (CONFIGS / "yolov8.yaml").read_text() + "ch: 1\n"
    model = build_detector(text, scale="n").eval()
    assert model.model[0].conv.in_channels == 1
    with torch.no_grad():
        assert model(torch.rand(1, 1, 64, 64)).shape == (1, 84, 84)
