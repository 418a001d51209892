"""The cost of a periodic checkpoint (``--checkpoint.every_n_steps``): the time to write ``last.ckpt``
(weights, EMA, optimizer, schedulers, loops, random streams; atomically) and its size, against the
time of one training step, for a shipped training config (by default the demo ViT and YOLOv8n).

The model and data come from the config; a few training steps run first (so that the optimizer has
its state), then the checkpoint is written ``--repeats`` times to a temporary folder. Medians.

    .venv/bin/python tools/bench_checkpoint.py [--configs demo_digits:cls demo_digit_boxes:det] [--repeats 7]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
from pytorch_lightning.callbacks import Callback  # noqa: E402

from vision_attn.tasks.checkpoint_io import AtomicCheckpointIO  # noqa: E402
from vision_attn.tasks.registry import get_task, parse_train_config  # noqa: E402
from vision_attn.tasks.resume_state import ResumeState  # noqa: E402


class _StepTimes(Callback):
    def __init__(self) -> None:
        self.times: list[float] = []
        self._t = 0.0

    def on_train_batch_start(self, *args) -> None:
        self._t = time.perf_counter()

    def on_train_batch_end(self, *args) -> None:
        self.times.append(time.perf_counter() - self._t)


def measure(config: str, task_name: str, steps: int, repeats: int) -> dict:
    task = get_task(task_name)
    cfg = parse_train_config(["--config", config], task)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    pl.seed_everything(0, verbose=False)
    module, datamodule = task.build(cfg, lambda line: None)
    timer = _StepTimes()
    trainer = pl.Trainer(accelerator="cpu", max_steps=steps, limit_val_batches=0, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[ResumeState(), timer], plugins=[AtomicCheckpointIO()],
                         use_distributed_sampler=False)
    trainer.fit(module, datamodule=datamodule)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "last.ckpt"
        saves = []
        for _ in range(repeats):
            t = time.perf_counter()
            trainer.save_checkpoint(path)
            saves.append(time.perf_counter() - t)
        size = path.stat().st_size
    step = statistics.median(timer.times[1:] or timer.times)
    save = statistics.median(saves)
    params = sum(p.numel() for p in module.model.parameters())
    return {"config": config, "params": params, "batch_size": cfg.data.batch_size, "threads": torch.get_num_threads(),
            "step_ms": round(1000 * step, 1), "save_ms": round(1000 * save, 1), "save_in_steps": round(save / step, 2),
            "size_mb": round(size / 2**20, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["demo_digits:cls", "demo_digit_boxes:det"],
                        help="shipped training configs (or files) with their task, NAME:TASK")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    for item in args.configs:
        config, task = item.rsplit(":", 1)
        print(json.dumps(measure(config, task, args.steps, args.repeats)), flush=True)


if __name__ == "__main__":
    main()
