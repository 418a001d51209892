"""A wheel of a fresh clone, installed without the repository: the shipped configs work by name from an
empty folder elsewhere (the must-show of the package-structure issue)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> str:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(args)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return proc.stdout


@pytest.mark.install  # minutes on a busy machine; `make test` runs it (pytest -m "not benchmark")
def test_wheel_of_a_fresh_clone_runs_the_shipped_configs_from_an_empty_folder(tmp_path):
    clone, wheels, site, empty = tmp_path / "clone", tmp_path / "wheels", tmp_path / "site", tmp_path / "empty"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), "."],
         clone, env)
    (wheel,) = wheels.glob("vision_attn-*.whl")
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
         tmp_path, env)
    assert (site / "vision_attn" / "configs" / "models" / "yolov8.yaml").is_file()
    empty.mkdir()
    env = dict(env, PYTHONPATH=str(site))
    cli = [sys.executable, "-m", "vision_attn.cli"]
    # the quick commands and a classifier's training in one interpreter (each would pay torch's import
    # again): where the package comes from, then yaml info, yaml insert, flops, configs and train cls
    # through vision_attn.cli.main
    script = (
        "import json, sys, vision_attn\n"
        "from vision_attn.cli import main\n"
        "print('FILE', vision_attn.__file__)\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    assert main(argv) == 0, argv\n")
    commands = [["yaml", "info", "yolov8n.yaml"],
                ["yaml", "insert", "yolo11n.yaml", "--block", "CBAM", "--after", "C3k2", "-o", "out.yaml"],
                ["flops", "yolov8n.yaml", "--json"], ["configs", "demo_*"]]
    quick = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
             "--data.num_workers", "0", "--trainer.enable_progress_bar", "false", "--data.persistent_workers", "false"]
    commands.append(["train", "cls", "--config", "demo_digits", *quick])
    out = _run([sys.executable, "-c", script, json.dumps(commands)], empty, env)
    assert f"FILE {site}" in out  # the installed copy, not the checkout
    assert "3,157,200 parameters" in out  # yaml info yolov8n.yaml: ultralytics' count
    assert '"params": 3157200' in out  # flops yolov8n.yaml
    assert "demo_digit_boxes" in out
    assert "CBAM" in (empty / "out.yaml").read_text()
    assert "final val top-1:" in out and (empty / "runs" / "demo_digits" / "best.ckpt").is_file()
    # and the command as a module of the installed copy, in a process of its own
    out = _run(cli + ["train", "det", "--config", "demo_digit_boxes", *quick, "--data.batch_size", "4",
                      "--model.plot_images", "0", "--trainer.check_val_every_n_epoch", "1"], empty, env)
    assert "final val mAP@.5:" in out and (empty / "runs" / "demo_digit_boxes" / "best.ckpt").is_file()
