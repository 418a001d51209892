"""Run ``vision-attn`` with one fault injected, for the fault tests (tests/test_cli_faults.py):

    python -m tests.faults FAULT STEP PIDS_FILE -- train cls ...

FAULT is where an exception is raised once the run is at optimizer step STEP or later (epoch 1 for
``validation`` and ``worker``):

- ``validation``: the task module's ``validation_step`` raises a DataError (a vision_attn error, as the
  COCO evaluator raised for an inverted box) in the second validation;
- ``training_step``: ``training_step`` raises a RuntimeError (an unexpected error);
- ``worker``: a loader worker's ``__getitem__`` raises a DataError in epoch 1;
- ``callback``: a callback (the Checkpointer, after its own work) raises a RuntimeError;
- ``block``: a loader worker's ``__getitem__`` never returns in epoch 1 (it writes PIDS_FILE.blocked
  first), a dataset on a hung file system.

Every loader worker appends its process id to PIDS_FILE when it starts, so that the test can check
that none survives the run. Workers are forked, so they inherit the patches.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from vision_attn.cli import main
from vision_attn.data import loader
from vision_attn.data.sampler import EpochItems
from vision_attn.errors import DataError
from vision_attn.tasks.checkpointer import Checkpointer
from vision_attn.tasks.classify.module import ClassificationModule
from vision_attn.tasks.detect.module import DetectionModule

MODULES = (ClassificationModule, DetectionModule)


def install(fault: str, step: int, pids_file: str) -> None:
    seed_worker = loader.seed_worker

    def recording_seed_worker(worker_id: int) -> None:
        with open(pids_file, "a") as f:
            f.write(f"{os.getpid()}\n")
        seed_worker(worker_id)

    loader.seed_worker = recording_seed_worker  # make_loader reads the module's name when it builds a loader

    if fault == "validation":
        for cls in MODULES:
            original = cls.validation_step

            def validation_step(self, *args, _original=original, **kwargs):
                if self.current_epoch >= 1:
                    raise DataError("injected: a bad value in the second validation")
                return _original(self, *args, **kwargs)

            cls.validation_step = validation_step
    elif fault == "training_step":
        for cls in MODULES:
            original = cls.training_step

            def training_step(self, *args, _original=original, **kwargs):
                if self.global_step >= step:
                    raise RuntimeError("injected: a training step failed")
                return _original(self, *args, **kwargs)

            cls.training_step = training_step
    elif fault == "worker":
        original = EpochItems.__getitem__

        def getitem(self, key):
            if key[1] >= 1:
                raise DataError(f"injected: item {key[0]} cannot be read in epoch {key[1]}")
            return original(self, key)

        EpochItems.__getitem__ = getitem
    elif fault == "block":
        original = EpochItems.__getitem__

        def getitem(self, key):
            if key[1] >= 1:
                Path(pids_file + ".blocked").touch()
                time.sleep(3600)
            return original(self, key)

        EpochItems.__getitem__ = getitem
    elif fault == "callback":
        original = Checkpointer.on_train_batch_start

        def on_train_batch_start(self, trainer, *args, **kwargs):
            original(self, trainer, *args, **kwargs)
            if trainer.global_step >= step:
                raise RuntimeError("injected: a callback failed")

        Checkpointer.on_train_batch_start = on_train_batch_start
    else:
        raise SystemExit(f"unknown fault {fault!r}")


if __name__ == "__main__":
    fault, step, pids_file, sep, *argv = sys.argv[1:]
    assert sep == "--", sys.argv
    install(fault, int(step), pids_file)
    raise SystemExit(main(argv))
