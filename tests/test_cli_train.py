"""`vision-attn train cls / eval cls / predict cls` on generated folders: the run folder, its metrics,
and one-line errors (exit 2) for each kind of bad input."""
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.folders import make_folder, write_image
from vision_attn.cli import main

TINY = """\
model:
  name: vit_tiny_patch16_224
  model_kwargs: {{patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2}}
  warmup_epochs: 0.5
  ema_decay: 0.9
data:
  root: {root}
  img_size: 16
  batch_size: 8
  num_workers: 0
  hflip: 0.0
trainer:
  accelerator: cpu
  max_epochs: 2
"""


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A generated folder (3 classes, 8 train / 3 val images each) and a config for it, cwd = tmp_path."""
    monkeypatch.chdir(tmp_path)
    root = make_folder(tmp_path / "data")
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY.format(root=root))
    return config, root


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def test_train_writes_the_run_folder_then_eval_and_predict(tiny, capsys, tmp_path):
    config, root = tiny
    assert main(["train", "cls", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    run = tmp_path / "runs" / "tiny"
    assert "final val top-1:" in out and "run folder: runs/tiny" in out
    for name in ("config.yaml", "best.ckpt", "last.ckpt", "model.safetensors", "metrics.json", "csv/metrics.csv",
                 "loss.png", "accuracy.png", "confusion.png"):
        assert (run / name).is_file(), name
    assert any((run / "tensorboard").glob("events.out.tfevents.*"))
    m = json.loads((run / "metrics.json").read_text())
    assert m["epochs"] == 2 and m["global_step"] == 2 * 3  # 24 images, batch 8, drop_last
    assert 0 <= m["val_top1"] <= m["val_top5"] <= 1 and m["val_images"] == 9 and m["train_images"] == 24
    assert m["params"] > 0 and m["gmacs"] > 0 and m["wall_time_s"] > 0 and m["ema"] is True
    assert set(m["per_class_accuracy"]) == {"cat", "dog", "fox"}
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["name"] == "tiny" and saved["data"]["img_size"] == 16 and saved["trainer"]["max_epochs"] == 2
    ckpt = torch.load(run / "last.ckpt", map_location="cpu", weights_only=True)
    # last.ckpt is written at the end of training: epoch counts the epochs done
    assert ckpt["epoch"] == 2 and any(k.startswith("ema.module.") for k in ckpt["state_dict"])

    assert main(["eval", "cls", "--checkpoint", str(run / "best.ckpt"), "--data", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == 9 and report["top1"] == pytest.approx(m["best_val_top1"], abs=1e-6)

    assert main(["predict", "cls", "--checkpoint", str(run), str(root / "val" / "dog"), "--top-k", "2", "--json"]) == 0
    preds = json.loads(capsys.readouterr().out)
    assert len(preds) == 3 and all(len(p["top"]) == 2 for p in preds)
    assert all(t["label"] in ("cat", "dog", "fox") and 0 <= t["prob"] <= 1 for p in preds for t in p["top"])

    # the same name again is refused unless resumed or overwritten
    assert main(["train", "cls", "--config", str(config)]) == 2
    assert "already exists: pass --resume true" in _error(capsys)


def test_print_config_and_typos(tiny, capsys):
    config, _ = tiny
    assert main(["train", "cls", "--config", str(config), "--model.lr", "0.01", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["lr"] == 0.01 and printed["data"]["img_size"] == 16
    assert main(["train", "cls", "--config", str(config), "--trainer.max_epoch", "3"]) == 2
    assert "unknown option --trainer.max_epoch: did you mean trainer.max_epochs?" in _error(capsys)
    config.write_text(config.read_text().replace("batch_size:", "batch_sise:"))
    assert main(["train", "cls", "--config", str(config)]) == 2
    assert "unknown config key 'data.batch_sise': did you mean data.batch_size?" in _error(capsys)


def test_empty_class_folder(tiny, capsys):
    config, root = tiny
    (root / "train" / "owl").mkdir()
    assert main(["train", "cls", "--config", str(config)]) == 2
    assert "owl: a train class folder with no images" in _error(capsys)


def test_val_class_missing_from_train(tiny, capsys):
    config, root = tiny
    write_image(root / "val" / "owl" / "x.png", 1)
    assert main(["train", "cls", "--config", str(config)]) == 2
    assert "class folder(s) 'owl' are not among train's 3 classes" in _error(capsys)


@pytest.mark.parametrize("workers", [0, 1])
def test_corrupt_image_names_the_file(tiny, capsys, workers):
    config, root = tiny
    (root / "train" / "dog" / "dog_bad.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    args = ["train", "cls", "--config", str(config), "--data.num_workers", str(workers), "--trainer.max_epochs", "1"]
    assert main(args) == 2
    err = _error(capsys)
    assert "dog_bad.png: a truncated image" in err and "--data.skip_bad_images true" in err
    assert "DataLoader worker" not in err


def test_skip_bad_images_reports_the_count(tiny, capsys, tmp_path):
    config, root = tiny
    (root / "train" / "dog" / "dog_bad.png").write_bytes(b"garbage")
    (root / "val" / "cat" / "cat_empty.png").write_bytes(b"")
    (root / "train" / "fox" / "notes.txt").write_text("ignored")
    threads = torch.get_num_threads()
    assert main(["train", "cls", "--config", str(config), "--data.skip_bad_images", "true",
                 "--trainer.max_epochs", "1", "--threads", "1"]) == 0
    assert torch.get_num_threads() == threads  # restored after the run
    out = " ".join(capsys.readouterr().out.split())
    assert "1 non-image file(s) ignored; 2 unreadable image(s) skipped" in out
    m = json.loads((tmp_path / "runs" / "tiny" / "metrics.json").read_text())
    assert m["skipped_bad_images"] == 2 and m["ignored_files"] == 1 and m["epochs"] == 1


def test_train_forever_without_a_schedule_length_is_a_config_error_that_leaves_no_folder(tiny, capsys, tmp_path):
    config, _ = tiny
    assert main(["train", "cls", "--config", str(config), "--trainer.max_epochs", "-1"]) == 2
    err = _error(capsys)
    assert "trainer.max_epochs=-1" in err and "trainer.max_steps" in err and "OverflowError" not in err
    assert not (tmp_path / "runs").exists()
    # with max_steps it has a length, and trains
    assert main(["train", "cls", "--config", str(config), "--trainer.max_epochs", "-1", "--trainer.max_steps", "2",
                 "--trainer.enable_progress_bar", "false"]) == 0
    assert json.loads((tmp_path / "runs" / "tiny" / "metrics.json").read_text())["global_step"] == 2


def test_a_start_that_fails_before_its_first_step_leaves_no_run_folder(tiny, capsys, tmp_path, monkeypatch):
    config, _ = tiny
    from vision_attn.tasks.classify import module as cls_module

    def broken(self, *a, **k):
        raise RuntimeError("the first step failed")

    with monkeypatch.context() as patch:
        patch.setattr(cls_module.ClassificationModule, "training_step", broken)
        assert main(["train", "cls", "--config", str(config), "--trainer.enable_progress_bar", "false"]) == 1
    assert "the first step failed" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "tiny").exists()
    # a folder such a start left behind (killed before the first step) is reused by a plain rerun
    left = tmp_path / "runs" / "tiny"
    (left / "csv").mkdir(parents=True)
    (left / "config.yaml").write_text("name: tiny\n")
    (left / "kernels.json").write_text("{}")
    assert main(["train", "cls", "--config", str(config), "--trainer.max_epochs", "1",
                 "--trainer.enable_progress_bar", "false"]) == 0
    assert (left / "last.ckpt").is_file()


def test_a_tab_in_the_config_names_the_line_the_column_and_the_character(tiny, capsys, tmp_path):
    config, _ = tiny
    text = config.read_text().replace("  img_size: 16", "\timg_size: 16")
    config.write_text(text)
    line = text.splitlines().index("\timg_size: 16") + 1
    assert main(["train", "cls", "--config", str(config)]) == 2
    err = _error(capsys)
    assert f"line {line}, column 1: not valid YAML" in err and "a tab" in err, err
    assert "replace the tab with spaces" in err and not (tmp_path / "runs").exists()


def test_a_run_without_validation_during_the_fit_states_what_it_measured_and_wrote(tiny, capsys, tmp_path):
    """One epoch, validated only after the fit (check_val_every_n_epoch 2): the validation is logged and
    plotted at the epoch that trained the weights, metrics.json has the training loss and the best value
    (best.ckpt holds the final weights) and lists only the files written."""
    from vision_attn.tasks.plots import epoch_history

    config, _ = tiny
    assert main(["train", "cls", "--config", str(config), "--trainer.max_epochs", "1",
                 "--trainer.check_val_every_n_epoch", "2", "--trainer.enable_progress_bar", "false"]) == 0
    run = tmp_path / "runs" / "tiny"
    history = epoch_history(run / "csv" / "metrics.csv")
    assert set(history["val/top1"]) == set(history["train/loss_epoch"]) == {0}
    m = json.loads((run / "metrics.json").read_text())
    assert m["train_loss"] is not None and m["best_val_top1"] == m["val_top1"] is not None
    assert "previous" not in m["files"] and "resumes" not in m["files"]
    assert all((run / name).exists() for name in m["files"].values()), m["files"]


def test_a_library_warning_and_a_wrong_value_type_are_one_line_in_our_words(tiny, capsys, tmp_path):
    import vision_attn
    from vision_attn.io.atomic import save_torch

    config, _ = tiny
    assert main(["train", "cls", "--config", str(config), "--trainer.max_epochs", "abc"]) == 2
    err = _error(capsys)
    assert "config key 'trainer.max_epochs': 'abc' is not an integer or null" in err and "Union" not in err
    # weights of a 5-class head fine-tuned on 3 classes: the warning that the head is re-initialised, on one line
    five = vision_attn.create_model("vit_tiny_patch16_224", patch_size=8, depth=1, embed_dim=32, num_heads=2,
                                    num_classes=5, img_size=16)
    weights = save_torch(five.state_dict(), tmp_path / "five.pth")
    # in a fresh process: pytest records warnings instead of showing them
    root = Path(vision_attn.__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "vision_attn", "train", "cls", "--config", str(config),
                           "--model.pretrained", str(weights), "--trainer.max_epochs", "1",
                           "--trainer.enable_progress_bar", "false", "--threads", "1"], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    lines = [line for line in err.splitlines() if "re-initialised" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: "), err
    assert "UserWarning" not in err and "warnings.warn(" not in err, err


def test_nan_loss_names_the_step(tiny, capsys):
    config, _ = tiny
    args = ["train", "cls", "--config", str(config), "--model.lr", "1e30", "--model.warmup_epochs", "0",
            "--model.ema_decay", "null", "--trainer.max_epochs", "3"]
    assert main(args) == 2
    err = _error(capsys)
    assert "the training loss is nan at step" in err and "lower model.lr" in err


def test_bf16_mixed_training_reaches_the_fused_kernels(tiny, capsys, tmp_path, monkeypatch):
    """``--precision bf16-mixed`` (``trainer.precision``): Lightning's bf16 autocast on the CPU, whose
    linear layers run through the oneDNN training path of vision_attn.kernels in bfloat16, under the
    fixed "onednn" plan (oneDNN at every size: this tiny model's layers may be below the crossovers a
    machine measures)."""
    kernels = importlib.import_module("vision_attn.kernels")
    linear_module = importlib.import_module("vision_attn.kernels.linear")
    if not kernels.onednn_works(torch.bfloat16):
        pytest.skip("oneDNN's fused linear cannot run bfloat16 on this machine")
    seen = []
    original = linear_module._Linear.apply

    def apply(x, weight, *args):
        seen.append((x.dtype, weight.dtype, torch.is_autocast_enabled("cpu")))
        return original(x, weight, *args)

    monkeypatch.setattr(linear_module._Linear, "apply", apply)
    config, _ = tiny
    # with clipping, which Lightning refuses under mixed precision for a fused optimizer step
    with kernels.kernel_plan("onednn"):  # the process's plan, which the run trains with (no --kernels)
        assert main(["train", "cls", "--config", str(config), "--precision", "bf16-mixed", "--trainer.max_epochs", "1",
                     "--trainer.gradient_clip_val", "1.0"]) == 0
    m = json.loads((tmp_path / "runs" / "tiny" / "metrics.json").read_text())
    assert m["precision"] == "bf16-mixed" and 0 <= m["val_top1"] <= 1
    assert seen and all(s == (torch.bfloat16, torch.bfloat16, False) for s in seen)
