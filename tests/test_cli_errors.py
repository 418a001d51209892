"""The errors users met raw, now one line naming the key or file, exit 2, no traceback: a folder with
one class, a Trainer argument Lightning rejects, a training config that is not YAML, a checkpoint
whose pickle would call a function."""
import os

import pytest
import torch

from tests.folders import make_folder
from vision_attn.cli import main

CONFIG = """\
model: {{name: vit_tiny_patch16_224, model_kwargs: {{patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2}}}}
data: {{root: {root}, img_size: 16, batch_size: 2, num_workers: 0}}
trainer: {{accelerator: cpu, max_epochs: 1, limit_train_batches: 1, enable_progress_bar: false}}
"""


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "tiny.yaml"
    path.write_text(CONFIG.format(root=make_folder(tmp_path / "data", n_train=2, n_val=1)))
    return path


def test_a_folder_with_one_class(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    root = make_folder(tmp_path / "one", classes=("cat",), n_train=2, n_val=1)
    (tmp_path / "one.yaml").write_text(CONFIG.format(root=root))
    assert main(["train", "cls", "--config", "one.yaml"]) == 2
    err = _error(capsys)
    assert str(root) in err and "one class folder (cat)" in err
    assert not (tmp_path / "runs" / "one" / "best.ckpt").exists()


@pytest.mark.parametrize("override, key", [
    (["--trainer.max_epochs", "-3"], "trainer.max_epochs"),
    (["--trainer.accumulate_grad_batches", "0"], "trainer.accumulate_grad_batches"),
    (["--trainer.limit_val_batches", "-1"], "trainer.limit_val_batches"),
])
def test_a_trainer_argument_lightning_rejects_names_the_key(config, capsys, override, key):
    (config.parent / "runs" / "tiny").mkdir(parents=True)
    (config.parent / "runs" / "tiny" / "metrics.json").write_text("{}")  # a previous run, to be kept
    assert main(["train", "cls", "--config", str(config), "--overwrite", *override]) == 2
    assert key in _error(capsys)
    assert (config.parent / "runs" / "tiny" / "metrics.json").read_text() == "{}"  # rejected before any deletion


def test_a_training_config_that_is_not_yaml_names_its_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  name: vit\n  lr: [1, 2\ndata: {}\n")
    assert main(["train", "cls", "--config", str(bad)]) == 2
    err = _error(capsys)
    assert bad.name in err and "line 4" in err and "<unicode string>" not in err


class _Calls:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_a_checkpoint_that_would_call_a_function_says_what(tmp_path, capsys):
    evil = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(1), "x": _Calls()}, evil)
    assert main(["export", "onnx", "--model", "vit_tiny_patch16_224", "--checkpoint", str(evil), "-o",
                 str(tmp_path / "m.onnx")]) == 2
    err = _error(capsys)
    assert "refused to load" in err and f"{os.system.__module__}.system" in err and str(evil) in err
    assert main(["yaml", "insert", "yolov8n.yaml", "--block", "CBAM", "--after", "C2f", "-o", str(tmp_path / "o.yaml"),
                 "--checkpoint", str(evil), "--checkpoint-out", str(tmp_path / "new.pt")]) == 2
    assert "refused to load" in _error(capsys) and not (tmp_path / "o.yaml").exists()
