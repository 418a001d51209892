"""The optimizer step on the CPU: torch's default loop, its multi-tensor (foreach) step and its fused
kernel, for the parameters of models this project trains (AdamW and Nesterov SGD), at 1 and 2 threads.

Every parameter gets a random gradient once; each variant then times ``--steps`` steps (median of
``--rounds`` rounds, the variants alternating within a round). `vision-attn train` takes the fused
step where Lightning allows it (vision_attn.tasks.optim.build_optimizer).

    .venv/bin/python tools/bench_optimizer.py [--models resnet18 vit_small_patch16_224 yolov8n] [--rounds 5]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from vision_attn.models import build_detector, create_model
from vision_attn.optimizers import OPTIMIZERS

VARIANTS = {"loop (default)": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
HYPER = {"adamw": {"lr": 1e-3}, "sgd": {"lr": 1e-2, "momentum": 0.937, "nesterov": True}}


def _model(name: str) -> torch.nn.Module:
    if name.startswith("yolo"):
        return build_detector("yolov8.yaml", scale=name[len("yolov8"):] or "n", num_classes=80)
    return create_model(name, num_classes=1000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "vit_small_patch16_224", "yolov8n"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    print("| model | params (M) | optimizer | threads | " + " | ".join(f"{v} ms" for v in VARIANTS) + " | fused speed-up |")
    print("| --- | ---: | --- | ---: | " + " | ".join("---:" for _ in VARIANTS) + " | ---: |")
    for name in args.models:
        model = _model(name)
        params = [p for p in model.parameters() if p.requires_grad]
        for p in params:
            p.grad = torch.randn_like(p)
        for threads in args.threads:
            torch.set_num_threads(threads)
            for opt_name, hyper in HYPER.items():
                optimizers = {v: OPTIMIZERS[opt_name](params, **hyper, **kw) for v, kw in VARIANTS.items()}
                times: dict[str, list[float]] = {v: [] for v in VARIANTS}
                for r in range(args.rounds + 1):
                    order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
                    for v in order:
                        start = time.perf_counter()
                        for _ in range(args.steps):
                            optimizers[v].step()
                        if r:  # round 0 warms up (state allocation)
                            times[v].append((time.perf_counter() - start) / args.steps)
                ms = {v: statistics.median(t) * 1e3 for v, t in times.items()}
                cells = " | ".join(f"{ms[v]:.1f}" for v in VARIANTS)
                print(f"| {name} | {sum(p.numel() for p in params) / 1e6:.1f} | {opt_name} | {threads} | {cells} | "
                      f"{ms['loop (default)'] / ms['fused']:.1f}x |")


if __name__ == "__main__":
    main()
