"""Issue 20: a run stopped at any step (SIGKILL, SIGTERM) and resumed with `--resume true` ends with the
weights (max difference 0.0), metrics, CSV log and TensorBoard scalars of the uninterrupted run with
the same seed. Through the command line, as separate processes; the kill steps are drawn from seeded
generators (one before the first validation, one in the middle of a later epoch). The runs that are
stopped are processes of their own; the uninterrupted references and the last resumes of one process
run in the test's process (the same plan, threads and seed: their weights must match to the bit)."""
import json
import random
import re
import signal
import subprocess
import sys

import pytest

from tests._configs import tiny_detection
from tests.folders import make_folder
from tests.tasks.resume_helpers import assert_same_run, env, progress_step, run_to_end, stop_at, train_here
from vision_attn.cli import main
from vision_attn.data import DigitBoxesConfig, write_digit_boxes

STEPS_PER_EPOCH = 6  # 48 images, batches of 8
STOP_LINE = re.compile(r"stopped by SIGTERM at step (\d+) \(epoch (\d+)\): checkpoint (\S+last\.ckpt); continue with "
                       r"the same command and --resume true")


def _cls_args(runs, root, name, workers=0):
    return ["train", "cls", "--name", name, "--runs_dir", str(runs), "--data.root", str(root),
            "--data.img_size", "16", "--data.batch_size", "8", "--data.num_workers", str(workers),
            "--data.hflip", "0.5", "--model.mixup", "0.5", "--model.ema_decay", "0.9", "--model.warmup_epochs", "1",
            "--model.model_kwargs", "{patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2, drop_rate: 0.1, "
            "drop_path_rate: 0.1}", "--trainer.accelerator", "cpu", "--trainer.max_epochs", "3",
            "--trainer.log_every_n_steps", "1", "--trainer.enable_progress_bar", "false", "--threads", "1",
            "--checkpoint.every_n_steps", "1"]


CLS_METRICS = ("val_top1", "val_top5", "val_loss", "train_loss", "best_val_top1")


@pytest.mark.parametrize("seed", [0])
def test_classification_stopped_four_ways_resumes_to_the_uninterrupted_run(tmp_path, seed, capsys):
    """SIGKILL before the first validation; a truncated last.ckpt (refused, nothing touched) and a resume
    from previous.ckpt; SIGKILL in the middle of epoch 1; a resume with a loader worker stopped by
    SIGTERM in the middle of epoch 2 (message, status 75, resumed from that step); the last resume."""
    root = make_folder(tmp_path / "data", n_train=16, n_val=4)
    train_here(_cls_args(tmp_path / "runs", root, "reference"), capsys)
    rng = random.Random(seed)
    first, second = rng.randint(1, STEPS_PER_EPOCH - 2), rng.randint(STEPS_PER_EPOCH + 1, 2 * STEPS_PER_EPOCH - 2)
    third = rng.randint(2 * STEPS_PER_EPOCH + 1, 3 * STEPS_PER_EPOCH - 2)
    run = tmp_path / "runs" / "killed"
    args = _cls_args(tmp_path / "runs", root, "killed")
    killed = stop_at(args, tmp_path, run, first, signal.SIGKILL)  # before the first validation
    assert killed.returncode == -signal.SIGKILL
    at = progress_step(run)
    assert first <= at < STEPS_PER_EPOCH and not (run / "metrics.json").exists()

    # a truncated last.ckpt: one line naming it and the way back to previous.ckpt; nothing is touched
    data = (run / "last.ckpt").read_bytes()
    (run / "last.ckpt").write_bytes(data[: len(data) // 2])
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(args + ["--resume", "true"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "last.ckpt: not a readable checkpoint" in err, err
    assert f"--ckpt_path {run / 'previous.ckpt'}" in err
    assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before

    killed = stop_at(args + ["--ckpt_path", str(run / "previous.ckpt")], tmp_path, run, second, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL  # mid-epoch, after a validation
    later = progress_step(run)
    assert second <= later < 2 * STEPS_PER_EPOCH and later % STEPS_PER_EPOCH

    worker = _cls_args(tmp_path / "runs", root, "killed", workers=1)  # the worker's augmentation: per item
    stopped = stop_at(worker + ["--resume", "true"], tmp_path, run, third, signal.SIGTERM)
    assert stopped.returncode == 75, stopped.stderr[-2000:]
    m = STOP_LINE.fullmatch(stopped.stderr.strip().splitlines()[-1])
    assert m, stopped.stderr[-2000:]
    step = int(m.group(1))
    assert m.group(3) == str(run / "last.ckpt") and progress_step(run) == step and step % STEPS_PER_EPOCH

    resumed = train_here(args + ["--resume", "true"], capsys)
    assert f"at step {step} (epoch {m.group(2)})" in " ".join(resumed.split())  # the progress line
    metrics = json.loads((run / "metrics.json").read_text())
    assert [r["step"] for r in metrics["resumes"]] == [at - 1, later, step]  # previous.ckpt: the step before
    assert_same_run(tmp_path / "runs" / "reference", run, CLS_METRICS)


RESUMED = {"model.plot_images": 0, "model.ema_tau": 5.0, "data.batch_size": 4, "trainer.log_every_n_steps": 1,
           "trainer.enable_progress_bar": False, "checkpoint.every_n_steps": 1, "threads": 1}
"""What the detection resume tests change in tests._configs.tiny_detection: a checkpoint every step."""


def test_detection_end_to_end_head_sigkill_then_sigterm_resumes_exactly(tmp_path, request, capsys):
    """YOLO26n (an end-to-end head: the loss's one-to-many gain decays per epoch) with mosaic closed for
    the last epoch: stopped by SIGKILL in the first epoch, then by SIGTERM in the closed-mosaic one."""
    root = write_digit_boxes(tmp_path / "data", DigitBoxesConfig(n_train=12, n_val=4, seed=1))  # 3 steps an epoch
    config = tmp_path / "tiny.yaml"
    config.write_text(tiny_detection(request.config.rootpath / "configs" / "models" / "yolo26.yaml", root, RESUMED))

    def args(name):
        return ["train", "det", "--config", str(config), "--runs_dir", str(tmp_path / "runs"), "--name", name]

    train_here(args("reference"), capsys)
    run = tmp_path / "runs" / "killed"
    rng = random.Random(1)
    killed = stop_at(args("killed"), tmp_path, run, rng.randint(1, 2), signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL and progress_step(run) < 3  # before the first validation
    stopped = stop_at(args("killed") + ["--resume", "true"], tmp_path, run, 4, signal.SIGTERM)
    assert stopped.returncode == 75 and STOP_LINE.fullmatch(stopped.stderr.strip().splitlines()[-1]), stopped.stderr
    assert 4 <= progress_step(run) < 6  # epoch 1, the last: the mosaic is closed
    train_here(args("killed") + ["--resume", "true"], capsys)
    assert_same_run(tmp_path / "runs" / "reference", run, ("val_map", "val_map50", "train_loss", "best_val_map"))


def test_rtdetr_sigkill_mid_epoch_resumes_exactly(tmp_path, request, capsys):
    """RT-DETR (rtdetr-s.yaml): each batch draws its denoising queries (noised boxes and labels) from the
    random stream, and its optimizer has the backbone's own learning-rate group; killed in the middle of
    the first epoch and resumed, the run ends with the uninterrupted run's weights, metrics and logs."""
    root = write_digit_boxes(tmp_path / "data", DigitBoxesConfig(n_train=12, n_val=4, seed=1))  # 3 steps an epoch
    config = tmp_path / "tiny.yaml"
    config.write_text(tiny_detection(request.config.rootpath / "configs" / "models" / "rtdetr-s.yaml", root, {
        **RESUMED, "model.scale": "s", "model.optimizer": "adamw", "model.lr": 0.0005, "model.backbone_lr_scale": 0.1,
        "trainer.gradient_clip_val": 0.1}))

    def args(name):
        return ["train", "det", "--config", str(config), "--runs_dir", str(tmp_path / "runs"), "--name", name]

    train_here(args("reference"), capsys)
    run = tmp_path / "runs" / "killed"
    killed = stop_at(args("killed"), tmp_path, run, 2, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL and progress_step(run) < 3
    train_here(args("killed") + ["--resume", "true"], capsys)
    assert_same_run(tmp_path / "runs" / "reference", run, ("val_map", "val_map50", "train_loss", "best_val_map"))


DDP_SCRIPT = """
import sys
from vision_attn.tasks import train_classifier

if __name__ == "__main__":  # Lightning starts the second process by running this script again
    train_classifier(sys.argv[1:])
"""


def test_two_process_ddp_sigkill_mid_epoch_then_resume_equals_the_uninterrupted_run(tmp_path):
    """DDP on the CPU (gloo): each process reads its share of an order fixed by (seed, epoch); both are
    killed in the middle of epoch 1 and resume from the same batch with their own random streams. The
    uninterrupted reference is a user's script that calls train_classifier (Lightning runs the script
    again for the second process) on the class folders; the stopped and resumed runs are `vision-attn
    train cls` on the same folders packed as shards (`vision-attn data pack`): the two processes read
    each item once per epoch from the shards, in the folder's order, and end with the reference's weights."""
    tmp, root = tmp_path, make_folder(tmp_path / "data", n_train=16, n_val=4)
    runs = tmp / "runs_ddp"
    ddp = ["--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.max_epochs", "2"]
    script = tmp / "ddp_train.py"
    script.write_text(DDP_SCRIPT)
    reference = subprocess.run([sys.executable, str(script), *_cls_args(runs, root, "reference")[2:], *ddp],
                               env=env(), cwd=tmp, capture_output=True, text=True, timeout=300)
    assert reference.returncode == 0, reference.stderr[-3000:]
    m = json.loads((runs / "reference" / "metrics.json").read_text())
    assert m["world_size"] == 2 and m["devices"] == 2 and m["epochs"] == 2
    assert m["global_step"] == 2 * STEPS_PER_EPOCH // 2  # each process takes half of every epoch
    assert m["val_images"] == 12 and (runs / "reference" / "best.ckpt").is_file()
    run = runs / "killed"
    assert main(["data", "pack", str(root), "-o", str(tmp / "shards"), "--shard-size", "5"]) == 0
    args = _cls_args(runs, tmp / "shards", "killed") + ddp
    half = STEPS_PER_EPOCH // 2  # 3 steps an epoch per process
    killed = stop_at(args, tmp, run, half + 1, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    at = progress_step(run)
    assert at % half and at < 2 * half
    run_to_end(args + ["--resume", "true"], tmp)
    m = json.loads((run / "metrics.json").read_text())
    assert m["world_size"] == 2 and [r["step"] for r in m["resumes"]] == [at]
    assert m["data"]["source"] == str(tmp / "shards") and m["train_images"] == 48
    assert_same_run(runs / "reference", run, CLS_METRICS)
