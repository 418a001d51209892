"""Nothing in a YAML runs: code in it is refused with a clear error and leaves no trace."""
import os

import pytest
import torch

from vision_attn.errors import ConfigError
from vision_attn.models.yolo import build_detector

from .conftest import CONFIGS

BASE = (CONFIGS / "yolov8.yaml").read_text()


def build_text(text):
    with torch.device("meta"):
        return build_detector(text, scale="n")


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "pwned"
    yield path
    assert not path.exists(), "the YAML ran code"


def test_activation_with_code_is_refused(marker):
    text = BASE + f"activation: \"__import__('os').system('touch {marker}')\"\n"
    with pytest.raises(ConfigError, match="activation.*not a known activation"):
        build_text(text)
    assert not marker.exists()


@pytest.mark.parametrize("name", ["eval", "exec", "os.system", "__import__", "torch.load", "open",
                                  "attempt_load_weights", "getattr"])
def test_function_as_module_is_refused(name, marker):
    text = BASE.replace("[-1, 1, SPPF, [1024, 5]]", f"[-1, 1, {name}, ['touch {marker}']]")
    with pytest.raises(ConfigError, match=r"row 9 field 'module': unknown module"):
        build_text(text)


def test_python_object_tag_is_refused(marker):
    text = BASE + f"evil: !!python/object/apply:os.system ['touch {marker}']\n"
    with pytest.raises(ConfigError, match="not a safe YAML"):
        build_text(text)
    text = BASE.replace("[64, 3, 2]", f"[!!python/object/apply:os.system ['touch {marker}']]")
    with pytest.raises(ConfigError, match="not a safe YAML"):
        build_text(text)


def test_argument_strings_are_not_run(marker):
    text = BASE.replace("[1024, 5]]", f"[1024, \"__import__('os').system('touch {marker}')\"]]")
    with pytest.raises(ConfigError, match="row 9 field 'args'"):
        build_text(text)


def test_known_activation_is_used():
    model = build_text(BASE + "activation: nn.ReLU()\n")
    acts = {type(m.act).__name__ for m in model.modules() if hasattr(m, "act") and hasattr(m, "bn")}
    assert "ReLU" in acts and "SiLU" not in acts


def test_no_files_written(tmp_path):
    before = set(os.listdir(tmp_path))
    build_text(BASE)
    assert set(os.listdir(tmp_path)) == before
