"""A run killed (SIGKILL) after its first checkpoint resumes from last.ckpt with its optimizer,
scheduler, EMA and epoch, and finishes with the right number of epochs and steps."""
import json
import os
import signal
import subprocess
import sys
import time

import torch

from tests.folders import make_folder
from vision_attn.cli import main

EPOCHS = 3


def _args(tmp_path, root):
    return ["train", "cls", "--name", "killed", "--runs_dir", str(tmp_path / "runs"), "--data.root", str(root),
            "--data.img_size", "16", "--data.batch_size", "8", "--data.num_workers", "0", "--data.hflip", "0",
            "--model.model_kwargs", "{patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2}",
            "--model.ema_decay", "0.9", "--model.warmup_epochs", "1", "--trainer.accelerator", "cpu",
            "--trainer.max_epochs", str(EPOCHS), "--trainer.enable_progress_bar", "false"]


def test_sigkill_then_resume(tmp_path):
    root = make_folder(tmp_path / "data", n_train=40, n_val=4)  # 120 images: 15 steps an epoch
    run = tmp_path / "runs" / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "vision_attn.cli", *_args(tmp_path, root)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (run / "last.ckpt").exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert not (run / "metrics.json").exists()  # killed before the end
    killed = torch.load(run / "last.ckpt", map_location="cpu", weights_only=True)
    steps_per_epoch = 120 // 8
    assert 0 < killed["global_step"] <= (EPOCHS - 2) * steps_per_epoch  # at least two epochs were left

    assert main(_args(tmp_path, root) + ["--resume"]) == 0
    m = json.loads((run / "metrics.json").read_text())
    assert m["epochs"] == EPOCHS and m["global_step"] == EPOCHS * steps_per_epoch
    assert m["resumed_from"].endswith("last.ckpt")
    final = torch.load(run / "last.ckpt", map_location="cpu", weights_only=True)
    assert final["global_step"] == EPOCHS * steps_per_epoch
    # AdamW's step counters ran on from the killed run's state: a fresh optimizer would count fewer
    steps = {int(s["step"]) for s in final["optimizer_states"][0]["state"].values()}
    assert steps == {EPOCHS * steps_per_epoch}
    assert final["lr_schedulers"][0]["t_initial"] == EPOCHS * steps_per_epoch
    assert final["ema_step"] == EPOCHS * steps_per_epoch
    # the EMA kept averaging: its weights differ from the live ones
    sd = final["state_dict"]
    assert not torch.equal(sd["model.head.weight"], sd["ema.module.head.weight"])
