"""A run that fails ends: an exception in the second validation, in a training step, inside a loader
worker's ``__getitem__`` or in a callback ends ``vision-attn train`` (a separate process, two persistent
loader workers) with its one-line error and exit status (2 for vision_attn's errors, 1 for others),
no worker process left alive, no temporary file, and a loadable last.ckpt from which ``--resume true``
finishes the run. Before, an error with live persistent workers left the process waiting for them
forever (they ignore SIGTERM, with which Python's exit ends its children). The faults are injected by
tests/faults.py."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.folders import make_folder
from tests.tasks.resume_helpers import env, progress_step
from vision_attn.cli import main
from vision_attn.data import DigitBoxesConfig, write_digit_boxes

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["--data.num_workers", "2", "--data.persistent_workers", "true", "--trainer.max_epochs", "2",
          "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu", "--threads", "1",
          "--checkpoint.every_n_steps", "1"]
STEPS_PER_EPOCH = {"cls": 3, "det": 2}
FAULTS = {  # fault -> exit status, the words of its one-line error
    "validation": (2, "error: injected: a bad value in the second validation"),
    "training_step": (1, "error: RuntimeError: injected: a training step failed (unexpected: run again with --debug"),
    "worker": (2, "error: injected: item"),
    "callback": (1, "error: RuntimeError: injected: a callback failed (unexpected: run again with --debug"),
}


def _args(task: str, tmp_path: Path) -> list[str]:
    runs = ["--runs_dir", str(tmp_path / "runs"), "--name", "run"]
    if task == "cls":
        root = make_folder(tmp_path / "data", n_train=8, n_val=2)  # 24 images: 3 batches of 8
        return ["train", "cls", *runs, "--data.root", str(root), "--data.img_size", "16", "--data.batch_size", "8",
                "--model.model_kwargs", "{patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2}", *COMMON]
    root = write_digit_boxes(tmp_path / "data", DigitBoxesConfig(n_train=8, n_val=4, seed=3))  # 2 batches of 4
    return ["train", "det", *runs, "--model.yaml", str(ROOT / "configs" / "models" / "yolov8.yaml"),
            "--model.scale", "n", "--model.warmup_epochs", "0", "--data.data", str(root), "--data.img_size", "64",
            "--data.batch_size", "4", *COMMON]


def _gone(pid: int) -> bool:
    """The process has ended (a zombie that its new parent has not reaped yet counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


@pytest.mark.parametrize("task,fault", [
    # a callback's RuntimeError ends the run through the path of a training step's (exit 1, "unexpected"),
    # so it is one case: a callback in the classification task
    ("cls", "validation"), ("cls", "worker"), ("cls", "callback"),
    # the detection task's own data module (its workers) and loss (its training step); a failing validation
    # ends a detection run through the same runner path as a classification run
    ("det", "worker"), ("det", "training_step")])
def test_a_failed_run_ends_and_resumes(task, fault, tmp_path, capsys):
    args = _args(task, tmp_path)
    pids = tmp_path / "worker_pids.txt"
    step = STEPS_PER_EPOCH[task] + 1  # in epoch 1, after the checkpoint of its first step
    proc = subprocess.run([sys.executable, "-m", "tests.faults", fault, str(step), str(pids), "--", *args],
                          env={**env(), "PYTHONPATH": str(ROOT)}, cwd=tmp_path, capture_output=True, text=True,
                          timeout=150)  # it used to wait forever
    status, words = FAULTS[fault]
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == status, proc.stderr[-3000:]
    assert lines and lines[-1].startswith(words) and "Traceback" not in proc.stderr, proc.stderr[-3000:]

    workers = [int(p) for p in pids.read_text().split()]
    assert len(workers) >= 2 and all(_gone(p) for p in workers), [(p, _gone(p)) for p in workers]

    run = tmp_path / "runs" / "run"
    assert not [p.name for p in run.rglob(".*") if p.is_file()]  # no temporary files left behind
    # a worker's error comes with epoch 1's first batch, before that batch's checkpoint
    assert progress_step(run) >= STEPS_PER_EPOCH[task] - (fault == "worker")
    assert "state_dict" in torch.load(run / "last.ckpt", map_location="cpu", weights_only=True)

    capsys.readouterr()
    assert main(args + ["--resume", "true"]) == 0, capsys.readouterr().err[-3000:]
    assert (run / "metrics.json").is_file() and (run / "model.safetensors").is_file()


def test_sigterm_ends_a_run_stuck_in_a_worker_after_the_grace_period(tmp_path):
    """A worker stuck in a dataset: the stop that SIGTERM asks for never reaches a batch, so the run ends
    after --checkpoint.stop_grace_s with a message saying where it waited; nothing survives it."""
    args = _args("cls", tmp_path) + ["--checkpoint.stop_grace_s", "2"]
    pids = tmp_path / "worker_pids.txt"
    proc = subprocess.Popen([sys.executable, "-m", "tests.faults", "block", "0", str(pids), "--", *args],
                            env={**env(), "PYTHONPATH": str(ROOT)}, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        blocked = Path(str(pids) + ".blocked")
        deadline = time.monotonic() + 120
        while not blocked.exists():
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no worker blocked within 120 s"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGTERM)  # as a cluster does: the whole process group
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 2, err[-3000:]
    assert err.strip().splitlines()[-1] == (
        "error: stopped by SIGTERM: the next training batch did not start within 2 s of the signal, waiting for a "
        "batch from the data loader (a dataset's __getitem__ has not returned); the run's last checkpoint is left "
        "as it was"), err[-3000:]
    workers = [int(p) for p in pids.read_text().split()]
    assert len(workers) >= 2 and all(_gone(p) for p in workers)
    assert "state_dict" in torch.load(tmp_path / "runs" / "run" / "last.ckpt", map_location="cpu", weights_only=True)
