"""A wheel of a fresh clone, installed without the repository: the shipped configs work by name from an
empty folder elsewhere (the must-show of the package-structure issue)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> str:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(args)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return proc.stdout


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
    where = _run([sys.executable, "-c", "import vision_attn; print(vision_attn.__file__)"], empty, env)
    assert where.startswith(str(site)), where  # the installed copy, not the checkout
    out = _run(cli + ["yaml", "info", "yolov8n.yaml"], empty, env)
    assert "3,157,200 parameters" in out
    _run(cli + ["yaml", "insert", "yolo11n.yaml", "--block", "CBAM", "--after", "C3k2", "-o", "out.yaml"], empty, env)
    assert "CBAM" in (empty / "out.yaml").read_text()
    assert json.loads(_run(cli + ["flops", "yolov8n.yaml", "--json"], empty, env))["params"] == 3_157_200
    assert "demo_digit_boxes" in _run(cli + ["configs", "demo_*"], empty, env)
    quick = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
             "--data.num_workers", "0", "--trainer.enable_progress_bar", "false"]
    out = _run(cli + ["train", "cls", "--config", "demo_digits", *quick, "--data.persistent_workers", "false"],
               empty, env)
    assert "final val top-1:" in out and (empty / "runs" / "demo_digits" / "best.ckpt").is_file()
    out = _run(cli + ["train", "det", "--config", "demo_digit_boxes", *quick, "--data.persistent_workers", "false",
                      "--data.batch_size", "4", "--model.plot_images", "0"], empty, env)
    assert "final val mAP@.5:" in out and (empty / "runs" / "demo_digit_boxes" / "best.ckpt").is_file()
