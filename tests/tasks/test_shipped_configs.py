"""Every shipped training config parses against the current keys (a renamed key would fail here, not
in a user's run), and the DeiT recipe carries the paper's random erasing into the data pipeline."""
from pathlib import Path

import pytest

from vision_attn.tasks import parse_train_config
from vision_attn.tasks.config import to_dict

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "train" / "classify"
DETECT_TRAINING = sorted((ROOT / "configs" / "train" / "detect").glob("*.yaml"))


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_classification_config_parses(path):
    cfg = to_dict(parse_train_config(["--config", str(path)]))
    assert {"model", "data", "trainer"} <= set(cfg)


@pytest.mark.parametrize("path", DETECT_TRAINING, ids=lambda p: p.name)
def test_detection_training_config_parses_and_names_a_model_yaml(path):
    cfg = to_dict(parse_train_config(["--config", str(path)], task="det"))
    assert (ROOT / cfg["model"]["yaml"]).is_file() and cfg["data"]["data"] == "demo:digit-boxes"


def test_deit_recipe_uses_random_erasing():
    cfg = to_dict(parse_train_config(["--config", str(CONFIGS / "deit_small_imagenet.yaml")]))
    assert cfg["data"]["random_erasing"] == 0.25 and cfg["data"]["rand_augment"] == 2
