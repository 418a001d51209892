"""The optimizer step on the CPU: torch's default loop, its multi-tensor (foreach) step and its fused
kernel, for the parameters of models this project trains (AdamW and Nesterov SGD), at 1 and 2 threads.

Every parameter gets a random gradient once; each variant then times ``--steps`` steps (median of
``--rounds`` rounds after one warm-up round that allocates the state, the variants alternating within
a round). `vision-attn train` takes the fused step where Lightning allows it
(vision_attn.tasks.optim.build_optimizer).

    python tools/bench.py optimizer --rounds 5
"""
from __future__ import annotations

import torch

from tools.suites.harness import Param, Suite, alternate, median_ms

VARIANTS = {"loop (default)": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
HYPER = {"adamw": {"lr": 1e-3}, "sgd": {"lr": 1e-2, "momentum": 0.937, "nesterov": True}}


def _model(name: str) -> torch.nn.Module:
    from vision_attn.models import build_detector, create_model

    if name.startswith("yolo"):
        return build_detector("yolov8.yaml", scale=name[len("yolov8"):] or "n", num_classes=80)
    return create_model(name, num_classes=1000)


def run(p, record) -> None:
    from vision_attn.optimizers import OPTIMIZERS

    lines = []
    for name in p.models:
        model = _model(name)
        params = [q for q in model.parameters() if q.requires_grad]
        for q in params:
            q.grad = torch.randn_like(q)
        for threads in p.threads:
            torch.set_num_threads(threads)
            for opt_name, hyper in HYPER.items():
                optimizers = {v: OPTIMIZERS[opt_name](params, **hyper, **kw) for v, kw in VARIANTS.items()}
                ms = median_ms(alternate({v: o.step for v, o in optimizers.items()}, p.rounds, iters=p.steps,
                                         warmup_rounds=1))
                millions = sum(q.numel() for q in params) / 1e6
                record.add("rows", {"model": name, "params_m": millions, "optimizer": opt_name, "threads": threads,
                                    **{f"{v} ms": ms[v] for v in VARIANTS}})
                lines.append([name, f"{millions:.1f}", opt_name, threads, *(f"{ms[v]:.1f}" for v in VARIANTS),
                              f"{ms['loop (default)'] / ms['fused']:.1f}x"])
    record.table(["model", "params (M)", "optimizer", "threads", *(f"{v} ms" for v in VARIANTS), "fused speed-up"],
                 lines)


SUITE = Suite("optimizer", "the optimizer step: torch's loop, foreach and fused (AdamW, Nesterov SGD)", run, (
    Param("models", ["resnet18", "vit_small_patch16_224", "yolov8n"], "models", quick=["resnet18"]),
    Param("threads", [1, 2], "torch threads", quick=[1]),
    Param("rounds", 5, "timed rounds", quick=1),
    Param("steps", 5, "steps a round", quick=1),
), doc=__doc__)
