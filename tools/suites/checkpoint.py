"""The cost of a periodic checkpoint (``--checkpoint.every_n_steps``): the time to write ``last.ckpt``
(weights, EMA, optimizer, schedulers, loops, random streams; atomically) and its size, against the
time of one training step, for a shipped training config (by default the demo ViT and YOLOv8n).

The model and data come from the config; a few training steps run first (so that the optimizer has
its state), then the checkpoint is written ``--repeats`` times to a temporary folder. Medians.

    python tools/bench.py checkpoint   # medians of 7 writes after 6 training steps
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from tools.suites.harness import Param, Suite


def measure(config: str, task_name: str, steps: int, repeats: int) -> dict:
    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.callbacks import Callback

    from vision_attn.tasks.checkpoint_io import AtomicCheckpointIO
    from vision_attn.tasks.registry import get_task, parse_train_config
    from vision_attn.tasks.resume_state import ResumeState

    class StepTimes(Callback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._t = 0.0

        def on_train_batch_start(self, *args) -> None:
            self._t = time.perf_counter()

        def on_train_batch_end(self, *args) -> None:
            self.times.append(time.perf_counter() - self._t)

    task = get_task(task_name)
    cfg = parse_train_config(["--config", config], task)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    pl.seed_everything(0, verbose=False)
    module, datamodule = task.build(cfg, lambda line: None)
    timer = StepTimes()
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


def run(p, record) -> None:
    rows = []
    for item in p.configs:
        config, task = item.rsplit(":", 1)
        rows.append(record.add("rows", measure(config, task, p.steps, p.repeats)))
    record.table(["config", "params", "batch", "threads", "step ms", "save ms", "save in steps", "size MiB"],
                 [list(r.values()) for r in rows])


SUITE = Suite("checkpoint", "the cost of writing last.ckpt against a training step", run, (
    Param("configs", ["demo_digits:cls", "demo_digit_boxes:det"],
          "shipped training configs (or files) with their task, NAME:TASK", quick=["demo_digits:cls"]),
    Param("steps", 6, "training steps before the writes", quick=2),
    Param("repeats", 7, "checkpoint writes", quick=1),
), doc=__doc__)
