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


V9E_LINKS = """backbone:
  - [-1, 1, Conv, [16, 3, 2]] # 0
  - [-1, 1, CBLinear, [[8, 16]]] # 1
  - [0, 1, Conv, [16, 3, 2]] # 2
  - [[1, -1], 1, CBFuse, [[1]]] # 3
head:
  - [[3, 3, 3], 1, Detect, [nc]]
"""


@pytest.mark.parametrize("base,old,new,pattern", [
    (BASE, "[[-1, 6], 1, Concat", "[[-1, 16], 1, Concat", r"row 11 field 'from': 16 points forward"),
    (BASE, "[[-1, 6], 1, Concat", "[[-1, 11], 1, Concat", r"row 11 field 'from': 11 points forward"),
    (BASE, "[[15, 18, 21], 1, Detect", "[[15, 18, 40], 1, Detect", r"row 22 field 'from': 40 points forward"),
    (BASE, "[-1, 1, Conv, [128, 3, 2]]", "[-5, 1, Conv, [128, 3, 2]]", r"row 1 field 'from': -5 points before row 0"),
    (BASE, "[-1, 1, Conv, [128, 3, 2]]", "[-1, 1, Conv]", r"row 1 \(backbone\): .* has 3 fields"),
    (BASE, "[-1, 1, Conv, [128, 3, 2]]", "[-1, 1, Conv, [128, 3, 2], 7]", r"row 1 \(backbone\): .* has 5 fields"),
    (BASE, "[-1, 1, SPPF, [1024, 5]]", "[-1, 1, SPPFF, [1024, 5]]", r"row 9 field 'module': unknown module 'SPPFF'; did you mean SPPF"),
    (BASE, "[-1, 1, SPPF, [1024, 5]]", "[-1, 0, SPPF, [1024, 5]]", r"row 9 field 'repeats'"),
    (BASE, "[-1, 1, SPPF, [1024, 5]]", "[-1, 1000000, SPPF, [1024, 5]]", r"row 9 field 'repeats'.* from 1 to 64"),
    (BASE, "[-1, 1, SPPF, [1024, 5]]", "[-1, 1, SPPF, [100000000, 5]]", r"row 9 field 'args': 100000000 output channels"),
    (BASE, "[-1, 1, SPPF, [1024, 5]]", "[-1, 1, SPPF, 1024]", r"row 9 field 'args': 1024 must be a list"),
    (BASE, "[-1, 1, SPPF, [1024, 5]]", "[-1, 1, SPPF, []]", r"row 9 field 'args': SPPF needs its output channel"),
    (BASE, "[-1, 1, SPPF, [1024, 5]]", "[-1, 1, SPPF, [1024, 5, 3, 1, 9, 9]]", r"row 9 field 'args': SPPF with arguments"),
    (BASE, "[-1, 1, SPPF, [1024, 5]]", "[[-1, 4], 1, SPPF, [1024, 5]]", r"row 9 field 'from': SPPF takes one input"),
    (BASE, "nc: 80", "nc: -1", r"field 'nc'"),
    (BASE, "nc: 80", "nc: 80\ndepth_multiplier: 2", r"unknown key 'depth_multiplier'; did you mean depth_multiple"),
    (V9E_LINKS, "[[1, -1], 1, CBFuse", "[[0, -1], 1, CBFuse", r"row 3 field 'from': CBFuse takes CBLinear rows then the map"),
    (V9E_LINKS, "CBFuse, [[1]]", "CBFuse, [[0]]", r"row 3 field 'args': group 0 of row 1 has 8 channels, the map it is added to 16"),
    (V9E_LINKS, "CBFuse, [[1]]", "CBFuse, [[2]]", r"row 3 field 'args': group 2 of row 1 is out of range \(it has 2 groups\)"),
    (V9E_LINKS, "CBFuse, [[1]]", "CBFuse, [[1, 0]]", r"row 3 field 'args': CBFuse takes \[\[i, ...\]\], one group index for each of its 1"),
    (V9E_LINKS, "CBLinear, [[8, 16]]", "CBLinear, [8]", r"row 1 field 'args': CBLinear takes \[\[channels, ...\]\]"),
    (V9E_LINKS, "[-1, 1, CBLinear, [[8, 16]]]", "[-1, 1, Conv, [16]]", r"row 3 field 'from': CBFuse takes CBLinear rows"),
])
def test_bad_rows(base, old, new, pattern):
    assert old in base
    with pytest.raises(ConfigError, match=pattern):
        build(base.replace(old, new, 1), scale="n" if base is BASE else None)


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


def test_unknown_new_family_modules_suggest_the_right_name():
    text = BASE.replace("[-1, 1, SPPF, [1024, 5]]", "[-1, 1, A2C2F, [1024, True, 4]]")
    with pytest.raises(ConfigError, match=r"row 9 field 'module': unknown module 'A2C2F'; did you mean A2C2f"):
        build(text)
    text = BASE.replace("Detect, [nc]", "V10Detect, [nc]")
    with pytest.raises(ConfigError, match=r"row 22 field 'module': unknown module 'V10Detect'; did you mean v10Detect"):
        build(text)


@pytest.mark.parametrize("spelling", ["torch.nn.ReLU()", "nn.ReLU()", "ReLU"])
def test_activation_text_is_matched_never_run(spelling):
    model = build(BASE + f"activation: {spelling}\n")
    assert isinstance(model.model[0].act, torch.nn.ReLU) and isinstance(model.model[9].cv1.act, torch.nn.ReLU)
    with pytest.raises(ConfigError, match="is not a known activation; it is matched as text, never run"):
        build(BASE + "activation: torch.nn.ReLU(inplace=__import__('os'))\n")
