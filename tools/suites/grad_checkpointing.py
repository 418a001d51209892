"""Training memory with and without gradient checkpointing (``set_grad_checkpointing()``).

    OMP_NUM_THREADS=2 python tools/bench.py grad-checkpointing --batch 16 --steps 2

Each configuration (model x checkpointing off/on) runs in a fresh process: the model at its
configured size (224 px), AdamW whose state is allocated before measuring (a step on zero
gradients), then ``--steps`` training steps (forward, cross-entropy, backward, AdamW) on a batch of
random images. Reported per configuration: the peak of the resident set above its level before
the steps (the activations, gradients and the allocator's working memory: what checkpointing is
for), the process's peak resident set (``ru_maxrss``, everything: torch, weights, optimizer state)
and the median seconds per step (what checkpointing costs: each block's forward runs again).
"""
from __future__ import annotations

import os

from tools.suites.harness import Param, Suite, log


def measure(name: str, checkpointing: bool, batch: int, steps: int, img_size: int) -> dict:
    """In a fresh process: one configuration's memory and seconds per step."""
    import resource
    import statistics
    import time

    import torch
    import torch.nn.functional as F

    import vision_attn
    from vision_attn.analysis.benchmark import rss_peak_mb

    torch.manual_seed(0)
    model = vision_attn.create_model(name, **({"img_size": img_size} if img_size else {})).train()
    model.set_grad_checkpointing(checkpointing)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()  # the optimizer's state exists before the measurement
    optimizer.zero_grad(set_to_none=True)
    size = model.pretrained_cfg["input_size"] if not img_size else (3, img_size, img_size)
    x, y = torch.randn(batch, *size), torch.randint(0, model.num_classes, (batch,))
    seconds: list[float] = []

    def step() -> None:
        start = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - start)

    rise = rss_peak_mb(step, calls=steps)
    return {"model": name, "checkpointing": checkpointing, "batch": batch, "steps": steps,
            "rss_peak_above_start_mb": rise,
            "process_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "seconds_per_step": statistics.median(seconds)}


def run(p, record) -> None:
    from tools.suites.harness import in_fresh_process

    rows = []
    for name in p.models:
        for on in (False, True):
            rows.append(record.add("rows", in_fresh_process(measure, name, on, p.batch, p.steps, p.img_size)))
            log(str(rows[-1]))
    record.table(["model", "grad checkpointing", "peak RSS above start (MiB)", "process peak RSS (MiB)", "s / step"],
                 [[r["model"], "on" if r["checkpointing"] else "off", f"{r['rss_peak_above_start_mb']:.0f}",
                   f"{r['process_peak_rss_mb']:.0f}", f"{r['seconds_per_step']:.2f}"] for r in rows],
                 f"threads {os.environ.get('OMP_NUM_THREADS', 'default')}, batch {p.batch}, {p.steps} steps, fp32, AdamW")


SUITE = Suite("grad-checkpointing", "training memory and step time with and without gradient checkpointing", run, (
    Param("models", ["vit_small_patch16_224", "swin_tiny_patch4_window7_224"], "models",
          quick=["vit_tiny_patch16_224"]),
    Param("batch", 16, "images a step", quick=1),
    Param("steps", 2, "training steps", quick=1),
    Param("img_size", 0, "pixels (0: the model's configured size)", quick=32),
), doc=__doc__)
