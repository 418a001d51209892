"""Benchmark: training memory with and without gradient checkpointing (``set_grad_checkpointing()``).

    OMP_NUM_THREADS=2 .venv/bin/python tools/bench_grad_checkpointing.py \\
        [--models vit_small_patch16_224 swin_tiny_patch4_window7_224] [--batch 16] [--steps 2]

Each configuration (model x checkpointing off/on) runs in a fresh process: the model at its
configured size (224 px), AdamW whose state is allocated before measuring (a step on zero
gradients), then ``--steps`` training steps (forward, cross-entropy, backward, AdamW) on a batch of
random images. Reported per configuration: the peak of the resident set above its level before
the steps (the activations, gradients and the allocator's working memory: what checkpointing is
for), the process's peak resident set (``ru_maxrss``, everything: torch, weights, optimizer state)
and the median seconds per step (what checkpointing costs: each block's forward runs again).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import vision_attn  # noqa: E402
from vision_attn.analysis.benchmark import rss_peak_mb  # noqa: E402
from vision_attn.io.atomic import write_json  # noqa: E402


def _measure(name: str, checkpointing: bool, batch: int, steps: int) -> dict:
    torch.manual_seed(0)
    model = vision_attn.create_model(name).train()
    model.set_grad_checkpointing(checkpointing)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()  # the optimizer's state exists before the measurement
    optimizer.zero_grad(set_to_none=True)
    size = model.pretrained_cfg["input_size"]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["vit_small_patch16_224", "swin_tiny_patch4_window7_224"])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--_one", nargs=2, help=argparse.SUPPRESS)  # MODEL on|off: the child process
    args = parser.parse_args()
    if args._one:
        print(json.dumps(_measure(args._one[0], args._one[1] == "on", args.batch, args.steps)))
        return
    rows = []
    for name in args.models:
        for mode in ("off", "on"):
            cmd = [sys.executable, __file__, "--_one", name, mode, "--batch", str(args.batch), "--steps", str(args.steps)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr)
    print(f"threads {os.environ.get('OMP_NUM_THREADS', 'default')}, batch {args.batch}, {args.steps} steps, fp32, AdamW\n")
    print("| model | grad checkpointing | peak RSS above start (MiB) | process peak RSS (MiB) | s / step |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {'on' if r['checkpointing'] else 'off'} | {r['rss_peak_above_start_mb']:.0f} | "
              f"{r['process_peak_rss_mb']:.0f} | {r['seconds_per_step']:.2f} |")
    if args.json:
        write_json(args.json, rows)


if __name__ == "__main__":
    main()
