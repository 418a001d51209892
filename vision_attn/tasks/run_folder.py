"""The folder of one training run, ``RUNS_DIR/NAME/`` (its files are written by :mod:`vision_attn.io.atomic`).

Layout: ``config.yaml`` (the full configuration), ``best.ckpt`` and ``last.ckpt`` (Lightning
checkpoints with optimizer, scheduler and EMA state), ``model.safetensors`` (the final evaluation
weights, loadable by ``create_model(name, pretrained=...)``), ``metrics.json``, ``csv/metrics.csv``,
``tensorboard/`` (event files), ``loss.png``, ``accuracy.png``, ``confusion.png``; ``kernels.json`` (the
CPU kernel plan the run trains with, reused when it continues); ``previous.ckpt`` (the
``last.ckpt`` before the latest), ``progress.json`` (step and epoch of ``last.ckpt``) and ``resumes.json``
(each resume: the checkpoint and the step it continued from).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vision_attn.errors import TrainingError
from vision_attn.io.atomic import format_bytes, free_space

__all__ = ["RunFolder"]

_RUN_MARKERS = ("config.yaml", "last.ckpt", "best.ckpt", "metrics.json")
# what a run writes before its first step: a folder of these alone is a start that never trained
_BEFORE_FIRST_STEP = frozenset({"config.yaml", "kernels.json", "csv", "tensorboard", "resumes.json"})


@dataclass(frozen=True)
class RunFolder:
    """Paths of a run folder; :meth:`prepare` applies the new/resume/overwrite rules."""

    path: Path

    config = property(lambda self: self.path / "config.yaml")
    best = property(lambda self: self.path / "best.ckpt")
    last = property(lambda self: self.path / "last.ckpt")
    previous = property(lambda self: self.path / "previous.ckpt")
    progress = property(lambda self: self.path / "progress.json")
    resumes = property(lambda self: self.path / "resumes.json")
    weights = property(lambda self: self.path / "model.safetensors")
    metrics = property(lambda self: self.path / "metrics.json")
    kernels = property(lambda self: self.path / "kernels.json")
    csv = property(lambda self: self.path / "csv" / "metrics.csv")

    def check(self, *, resume: bool, overwrite: bool, main_process: bool = True) -> None:
        """The rules of :meth:`prepare`, checked without touching anything: a new run needs a free (or
        empty) folder, a folder a start left before its first step (:meth:`unstarted`), or ``overwrite``
        for a previous run's folder; ``resume`` needs ``last.ckpt``.
        Other processes of a multi-process run find the folder their main process made."""
        if resume:
            if not self.last.is_file():
                other = (f"resume from the previous checkpoint with --ckpt_path {self.previous}"
                         if self.previous.is_file() else "start the run without --resume (or give --ckpt_path PATH)")
                raise TrainingError(f"{self.path}: no last.ckpt to resume from; {other}")
            return
        if main_process and self.path.exists() and any(self.path.iterdir()):
            if not overwrite and not self.unstarted():
                raise TrainingError(f"run folder {self.path} already exists: pass --resume true to continue it, "
                                    f"--overwrite true to replace it, or --name OTHER for a new run")
            if not any((self.path / m).exists() for m in _RUN_MARKERS):
                raise TrainingError(f"{self.path} is not a run folder (no {', '.join(_RUN_MARKERS)}); refusing to "
                                    f"delete it: choose another --name or --runs_dir")

    def unstarted(self) -> bool:
        """The folder holds only what a run writes before its first step (its configuration, kernel plan,
        empty logs): a start that failed or was killed before training, which a new run may replace."""
        try:
            names = {e.name for e in os.scandir(self.path)}
        except OSError:
            return False
        return "config.yaml" in names and "kernels.json" in names and names <= _BEFORE_FIRST_STEP

    def discard_unstarted(self) -> None:
        """Remove the folder if :meth:`unstarted` (nothing of a trained step in it)."""
        if self.unstarted():
            shutil.rmtree(self.path, ignore_errors=True)

    def check_room(self, checkpoint_bytes: int) -> None:
        """Before training starts: the folder exists or can be created, can be written, and its file
        system has room for two checkpoints of ``checkpoint_bytes`` (``last.ckpt`` and the one that
        replaces it); a TrainingError naming the folder otherwise."""
        folder = Path(os.path.abspath(self.path))
        while not folder.exists() and not folder.is_symlink() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir():
            what = "a broken link" if folder.is_symlink() and not folder.exists() else "a file, not a folder"
            raise TrainingError(f"run folder {self.path}: {folder} is {what}; choose another --runs_dir or --name")
        try:
            fd, probe = tempfile.mkstemp(dir=folder, prefix=".vision_attn-write-check.")
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise TrainingError(f"run folder {self.path}: {folder} cannot be written ({e.strerror}); make it "
                                f"writable or choose another --runs_dir") from None
        _, free = free_space(folder)
        need = 2 * checkpoint_bytes
        if free < need:
            raise TrainingError(f"run folder {self.path}: {format_bytes(free)} free on the file system of {folder}, "
                                f"but a checkpoint of this model takes about {format_bytes(checkpoint_bytes)} and a "
                                f"run needs room for two ({format_bytes(need)}); free some space or choose another "
                                f"--runs_dir")

    def prepare(self, *, resume: bool, overwrite: bool, main_process: bool = True) -> None:
        """:meth:`check`, then a new run's folder is created (a previous run's cleared with
        ``overwrite``). Only the main process creates or clears it."""
        self.check(resume=resume, overwrite=overwrite, main_process=main_process)
        if resume or not main_process:
            return
        if self.path.exists() and any(self.path.iterdir()):
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
