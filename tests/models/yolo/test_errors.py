"""Bad rows are errors that name the file, the row and the field."""
import pytest
import torch

from vision_attn.errors import ConfigError
from vision_attn.models.yolo import build_detector

from .conftest import CONFIGS

BASE = (CONFIGS / "yolov8.yaml").read_text()


def build(text, scale="n"):
    with torch.device("meta"):
        return build_detector(text, scale=scale)


@pytest.mark.parametrize("old,new,pattern", [
    ("[[-1, 6], 1, Concat", "[[-1, 16], 1, Concat", r"row 11 field 'from': 16 points forward"),
    ("[[-1, 6], 1, Concat", "[[-1, 11], 1, Concat", r"row 11 field 'from': 11 points forward"),
    ("[[15, 18, 21], 1, Detect", "[[15, 18, 40], 1, Detect", r"row 22 field 'from': 40 points forward"),
    ("[-1, 1, Conv, [128, 3, 2]]", "[-5, 1, Conv, [128, 3, 2]]", r"row 1 field 'from': -5 points before row 0"),
    ("[-1, 1, Conv, [128, 3, 2]]", "[-1, 1, Conv]", r"row 1 \(backbone\): .* has 3 fields"),
    ("[-1, 1, Conv, [128, 3, 2]]", "[-1, 1, Conv, [128, 3, 2], 7]", r"row 1 \(backbone\): .* has 5 fields"),
    ("[-1, 1, SPPF, [1024, 5]]", "[-1, 1, SPPFF, [1024, 5]]", r"row 9 field 'module': unknown module 'SPPFF'; did you mean SPPF"),
    ("[-1, 1, SPPF, [1024, 5]]", "[-1, 0, SPPF, [1024, 5]]", r"row 9 field 'repeats'"),
    ("[-1, 1, SPPF, [1024, 5]]", "[-1, 1000000, SPPF, [1024, 5]]", r"row 9 field 'repeats'.* from 1 to 64"),
    ("[-1, 1, SPPF, [1024, 5]]", "[-1, 1, SPPF, [100000000, 5]]", r"row 9 field 'args': 100000000 output channels"),
    ("[-1, 1, SPPF, [1024, 5]]", "[-1, 1, SPPF, 1024]", r"row 9 field 'args': 1024 must be a list"),
    ("[-1, 1, SPPF, [1024, 5]]", "[-1, 1, SPPF, []]", r"row 9 field 'args': SPPF needs its output channel"),
    ("[-1, 1, SPPF, [1024, 5]]", "[-1, 1, SPPF, [1024, 5, 3, 1, 9, 9]]", r"row 9 field 'args': SPPF with arguments"),
    ("[-1, 1, SPPF, [1024, 5]]", "[[-1, 4], 1, SPPF, [1024, 5]]", r"row 9 field 'from': SPPF takes one input"),
    ("nc: 80", "nc: -1", r"field 'nc'"),
    ("nc: 80", "nc: 80\ndepth_multiplier: 2", r"unknown key 'depth_multiplier'; did you mean depth_multiple"),
])
def test_bad_rows(old, new, pattern):
    assert old in BASE
    with pytest.raises(ConfigError, match=pattern):
        build(BASE.replace(old, new, 1))


def test_unknown_scale():
    with pytest.raises(ConfigError, match=r"scale 'q' is not defined; the file defines n, s, m, l, x"):
        build(BASE, scale="q")


def test_file_name_in_message(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(BASE.replace("SPPF, [1024, 5]", "SPPFF, [1024, 5]"))
    with pytest.raises(ConfigError, match=r"broken\.yaml: row 9 field 'module'"):
        build(path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such YAML file"):
        build(tmp_path / "nothing.yaml")


def test_wiring_that_does_not_fit():
    # Concat of P4 (stride 16) with the upsampled P5 at stride 8 cannot concatenate
    with pytest.raises(ConfigError, match="rows do not fit together"):
        build(BASE.replace("[[-1, 6], 1, Concat", "[[-1, 4], 1, Concat", 1))


def test_not_a_mapping():
    with pytest.raises(ConfigError, match="must be a mapping"):
        build("- 1\n- 2\n")
