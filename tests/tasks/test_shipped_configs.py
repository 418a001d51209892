"""Every shipped training config parses against the current keys (a renamed key would fail here, not
in a user's run), and the DeiT recipe carries the paper's random erasing into the data pipeline."""
import subprocess
import sys
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


def test_batch_limits_keep_int_and_float_apart_whatever_was_imported_first():
    """``--trainer.limit_val_batches 1`` is one batch and ``0.5`` half of them, also in a process that
    imported rich before Lightning (as the command line does): rich's ``Optional[Union[float, int]]``
    is typing's cached Union for Lightning's annotation, which made jsonargparse read 1 as 1.0."""
    code = ("import rich.progress\n"
            "from vision_attn.tasks import parse_train_config\n"
            "t = parse_train_config(['--trainer.limit_val_batches', '1', '--trainer.limit_train_batches', '0.5',\n"
            "                        '--trainer.overfit_batches', '2', '--model.name', 'vit_tiny_patch16_224']).trainer\n"
            "print(repr(t.limit_val_batches), repr(t.limit_train_batches), repr(t.overfit_batches))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "0.5", "2"]


@pytest.mark.parametrize("task,folder,data", [("pose", "pose", "demo:digit-keypoints"), ("obb", "obb", "demo:digit-obb")])
def test_pose_and_obb_training_configs_parse_and_name_their_yaml(task, folder, data):
    for path in sorted((ROOT / "configs" / "train" / folder).glob("*.yaml")):
        cfg = to_dict(parse_train_config(["--config", str(path)], task=task))
        assert (ROOT / "configs" / "models" / cfg["model"]["yaml"]).is_file() and cfg["data"]["data"] == data
        assert f"-{folder}" in cfg["model"]["yaml"] and cfg["data"]["img_size"] == 160
