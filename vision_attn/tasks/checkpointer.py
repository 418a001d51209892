"""When a run writes ``last.ckpt``: at the start of a training batch, every ``every_n_steps`` optimizer
steps, every ``every_minutes`` minutes, at the first batch of each epoch (the previous one finished,
validation included), when a signal asked to stop (:mod:`vision_attn.tasks.signals`), and at the end
of training.

A checkpoint taken at the start of a batch holds everything before that batch and nothing of it:
the loggers are flushed first (their files then hold every step before it), the data module's state
says which batch comes next, and :class:`~vision_attn.tasks.resume_state.ResumeState` holds the random
streams as they are just before it. ``progress.json`` in the run folder then names the checkpoint's step
and epoch. Writes are atomic (:class:`~vision_attn.tasks.checkpoint_io.AtomicCheckpointIO`, which also
keeps the previous ``last.ckpt`` as ``previous.ckpt``).
"""
from __future__ import annotations

import os
import subprocess
import time
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback

from vision_attn.errors import TrainingStopped
from vision_attn.io.atomic import write_json
from vision_attn.tasks.run_folder import RunFolder
from vision_attn.tasks.signals import StopRequest

__all__ = ["Checkpointer"]


class Checkpointer(Callback):
    """Writes ``run.last`` as the module docstring says; ``stop``: the signal handlers it installs while
    training runs."""

    def __init__(self, run: RunFolder, *, every_n_steps: int | None = None, every_minutes: float | None = None,
                 stop: StopRequest | None = None) -> None:
        self.run = run
        self.every_n_steps = every_n_steps
        self.every_minutes = every_minutes
        self.stop = stop if stop is not None else StopRequest()
        self._saved_step = -1
        self._since = time.monotonic()

    @property
    def state_key(self) -> str:
        return "vision_attn.Checkpointer"

    def state_dict(self) -> dict[str, Any]:
        return {"step": self._saved_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._saved_step = int(state_dict.get("step", -1))

    # ---------------------------------------------------------------- hooks
    def on_train_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        self._since = time.monotonic()
        self.stop.install()

    def on_train_batch_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", batch: Any,
                             batch_idx: int) -> None:
        requested = self.stop.signum is not None
        if trainer.world_size > 1:  # one process's signal stops them all at the same step
            requested = trainer.strategy.reduce_boolean_decision(requested, all=False)
        if (requested or self._due(trainer)) and trainer.global_step != self._saved_step:
            self.save(trainer)
        if requested:
            self._stopped(trainer)

    def on_train_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        self.stop.uninstall()
        if trainer.global_step != self._saved_step:
            self.save(trainer)

    def on_exception(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", exception: BaseException) -> None:
        self.stop.uninstall()

    # ---------------------------------------------------------------- writing
    def _due(self, trainer: "pl.Trainer") -> bool:
        step = trainer.global_step
        if self.every_n_steps and step > 0 and step % self.every_n_steps == 0:
            return True
        if trainer.current_epoch > 0 and trainer.fit_loop.epoch_loop.batch_progress.current.completed == 0:
            return True  # an epoch's first batch: the previous epoch is complete
        if self.every_minutes:
            due = time.monotonic() - self._since >= 60 * self.every_minutes
            return bool(trainer.strategy.broadcast(due)) if trainer.world_size > 1 else due
        return False

    def save(self, trainer: "pl.Trainer") -> None:
        """Flush the loggers, write ``last.ckpt`` and ``progress.json``."""
        for logger in trainer.loggers:
            logger.save()
        trainer.save_checkpoint(self.run.last)
        self._saved_step = trainer.global_step
        self._since = time.monotonic()
        if trainer.is_global_zero:
            write_json(self.run.progress, {"step": trainer.global_step, "epoch": trainer.current_epoch,
                                           "checkpoint": self.run.last.name, "time": time.time()})

    def _stopped(self, trainer: "pl.Trainer") -> None:
        self.stop.uninstall()
        array = os.environ.get("SLURM_ARRAY_JOB_ID")
        job = f"{array}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}" if array else os.environ.get("SLURM_JOB_ID")
        requeued = ""
        if self.stop.name == "SIGUSR1" and job and trainer.is_global_zero:  # Lightning's SLURM requeue signal
            try:
                ok = subprocess.call(["scontrol", "requeue", job]) == 0
            except OSError:
                ok = False
            requeued = f"; SLURM job {job} {'requeued' if ok else 'NOT requeued (scontrol failed)'}"
        raise TrainingStopped(
            f"stopped by {self.stop.name} at step {trainer.global_step} (epoch {trainer.current_epoch}): checkpoint "
            f"{self.run.last}{requeued}; continue with the same command and --resume true")
