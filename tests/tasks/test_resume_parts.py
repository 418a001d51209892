"""The pieces of exact resume, each alone: the epoch sampler (against torch's DistributedSampler), items
augmented by (seed, epoch, index), the CSV log continued with new columns, previous.ckpt, the stop
signals."""
import json
import os
import signal

import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

from vision_attn.data import train_transforms
from vision_attn.data.sampler import EpochItems, EpochSampler
from vision_attn.tasks.checkpoint_io import AtomicCheckpointIO
from vision_attn.tasks.logs import ContinuedCSVLogger
from vision_attn.tasks.signals import StopRequest


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_epoch_sampler_is_distributed_samplers_order(replicas):
    for epoch in (0, 3):
        for rank in range(replicas):
            ours = EpochSampler(10, shuffle=True, seed=7, num_replicas=replicas, rank=rank)
            peer = DistributedSampler(range(10), num_replicas=replicas, rank=rank, shuffle=True, seed=7)
            ours.set_epoch(epoch)
            peer.set_epoch(epoch)
            assert list(ours) == list(peer) and len(ours) == len(peer)


def test_epoch_sampler_resumes_part_way_once():
    s = EpochSampler(8, shuffle=True, seed=1, with_epoch=True)
    full = list(EpochSampler(8, shuffle=True, seed=1, with_epoch=True).order(2))
    s.resume_at(2, 3)
    s.set_epoch(2)  # Lightning sets the epoch it resumes: the position stays
    assert list(s) == [(i, 2) for i in full[3:]]
    assert list(s) == [(i, 2) for i in full]  # the next pass of the same epoch starts at its first item
    s.set_epoch(3)
    assert [i for i, _ in s] == EpochSampler(8, shuffle=True, seed=1).order(3) != full


class _Images:
    def __init__(self):
        self.transform = train_transforms(8, scale=(0.3, 1.0), hflip=0.5, color_jitter=0.4, seed=0)
        self.images = np.random.default_rng(0).integers(0, 255, (4, 12, 12, 3), dtype=np.uint8)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.transform(image=self.images[i])["image"]


def test_an_items_augmentation_depends_on_seed_epoch_and_index_only():
    items = EpochItems(_Images(), seed=3)
    forward = [items[(i, 1)] for i in range(4)]
    backward = [items[(i, 1)] for i in reversed(range(4))][::-1]
    assert all(np.array_equal(a, b) for a, b in zip(forward, backward))
    assert not np.array_equal(items[(0, 1)], items[(0, 2)])


def test_the_csv_log_continues_with_new_columns(tmp_path):
    """Today's crash: `ValueError: dict contains fields not in fieldnames` when a resumed run logs a
    column the file's header lacks. Rows from the resumed step on are the resumed run's."""
    first = ContinuedCSVLogger(tmp_path, name="csv", version="")
    for step in range(4):
        first.log_metrics({"train/loss_step": float(step)}, step=step)
    first.save()
    resumed = ContinuedCSVLogger(tmp_path, name="csv", version="", resume_step=2)
    resumed.log_metrics({"train/loss_step": 20.0}, step=2)
    resumed.log_metrics({"val/top1": 0.5, "train/loss_epoch": 1.5}, step=2)
    resumed.save()
    lines = (tmp_path / "csv" / "metrics.csv").read_text().splitlines()
    assert lines == ["step,train/loss_epoch,train/loss_step,val/top1", "0,,0.0,", "1,,1.0,", "2,,20.0,",
                     "2,1.5,,0.5"]


def test_last_ckpt_keeps_the_one_before_as_previous(tmp_path):
    last, previous = tmp_path / "last.ckpt", tmp_path / "previous.ckpt"
    io = AtomicCheckpointIO(keep_previous={last: previous})
    io.save_checkpoint({"global_step": 1}, last)
    assert not previous.exists()
    io.save_checkpoint({"global_step": 2}, last)
    io.save_checkpoint({"global_step": 3}, last)
    assert torch.load(last, weights_only=True)["global_step"] == 3
    assert torch.load(previous, weights_only=True)["global_step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "previous.ckpt"]


def test_first_ctrl_c_asks_to_stop_the_second_stops_at_once():
    before = signal.getsignal(signal.SIGINT)
    for first in (signal.SIGINT, signal.SIGTERM):
        stop = StopRequest()
        stop.install()
        try:
            os.kill(os.getpid(), first)
            assert stop.name == first.name  # a request, honoured at the next batch
            with pytest.raises(KeyboardInterrupt):  # Ctrl-C after a request: at once
                os.kill(os.getpid(), signal.SIGINT)
        finally:
            stop.uninstall()
        assert signal.getsignal(signal.SIGINT) is before


def _tiny(tmp_path, **extra):
    from tests.folders import make_folder

    root = make_folder(tmp_path / "data", n_train=8, n_val=2)  # 24 images: 3 steps an epoch
    return {"runs_dir": str(tmp_path / "runs"), "name": "tiny",
            "model": {"name": "vit_tiny_patch16_224", "model_kwargs": {"patch_size": 8, "depth": 1, "embed_dim": 32,
                                                                       "num_heads": 2}},
            "data": {"root": str(root), "img_size": 16, "batch_size": 8, "num_workers": 0},
            "trainer": {"max_epochs": 2, "accelerator": "cpu", "enable_progress_bar": False}, **extra}


def test_checkpoints_every_few_minutes_and_at_epoch_starts(tmp_path):
    from vision_attn.tasks import train_classifier

    def previous_step(result):
        return torch.load(result.run_dir / "previous.ckpt", weights_only=True)["global_step"]

    plain = train_classifier(_tiny(tmp_path / "a"))  # last.ckpt at the second epoch's start (3) and the end (6)
    assert previous_step(plain) == 3
    timed = train_classifier(_tiny(tmp_path / "b", checkpoint={"every_minutes": 1e-9}))  # at every batch
    assert previous_step(timed) == 5
    assert json.loads((timed.run_dir / "progress.json").read_text())["step"] == 6


@pytest.mark.parametrize("key, value", [("every_n_steps", 0), ("every_minutes", -1.0)])
def test_bad_checkpoint_intervals_are_config_errors(tmp_path, key, value):
    from vision_attn.errors import ConfigError
    from vision_attn.tasks import train_classifier

    with pytest.raises(ConfigError, match=rf"checkpoint\.{key}={value}"):
        train_classifier(_tiny(tmp_path, checkpoint={key: value}))
    assert not (tmp_path / "runs" / "tiny").exists()


def test_a_requeue_signal_under_slurm_requeues_the_job(tmp_path, monkeypatch):
    """SIGUSR1 (Lightning's SLURM requeue signal) stops like SIGTERM, then `scontrol requeue JOB`."""
    from types import SimpleNamespace

    from vision_attn.errors import TrainingStopped
    from vision_attn.tasks.checkpointer import Checkpointer
    from vision_attn.tasks.run_folder import RunFolder

    scontrol = tmp_path / "bin" / "scontrol"
    scontrol.parent.mkdir()
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'called'}\n")
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{scontrol.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    checkpointer = Checkpointer(RunFolder(tmp_path / "run"))
    checkpointer.stop.signum = signal.SIGUSR1
    trainer = SimpleNamespace(global_step=7, current_epoch=1, is_global_zero=True)
    with pytest.raises(TrainingStopped, match=r"stopped by SIGUSR1 at step 7 \(epoch 1\).*SLURM job 4242 requeued"):
        checkpointer._stopped(trainer)
    assert (tmp_path / "called").read_text().split() == ["requeue", "4242"]


def test_resuming_from_a_file_that_is_not_a_training_checkpoint_is_refused(tmp_path):
    from safetensors.torch import save_file

    from vision_attn.errors import CheckpointError
    from vision_attn.tasks import train_classifier

    weights = tmp_path / "w.safetensors"
    save_file({"x": torch.zeros(1)}, weights)
    with pytest.raises(CheckpointError, match="not a training checkpoint of a run"):
        train_classifier(_tiny(tmp_path, ckpt_path=str(weights)))
