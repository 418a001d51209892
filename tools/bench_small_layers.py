"""Small layers on the CPU: the training step of the demo's ViT (4 blocks of width 128, 17 tokens: 16
patches and the class token; 1 thread) with the measured crossover of vision_attn.layers.linear (products below it through ATen), with
every product the self-check chose for oneDNN at every size (the behaviour before the crossover), and
timm's model of the same configuration, in one process, alternating, the same weights; then each
product's two kernels at the layer sizes of that model.

    .venv/bin/python tools/bench_small_layers.py [--batch 1 32] [--rounds 15]
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import statistics
import time

import timm
import torch
import torch.nn.functional as F

from vision_attn.analysis.benchmark import share_weights
from vision_attn.models import create_model

linear_module = importlib.import_module("vision_attn.layers.linear")  # the package exports the function `linear`
CONFIG = dict(img_size=16, patch_size=4, embed_dim=128, depth=4, num_heads=4, num_classes=10, global_pool="avg")


@contextlib.contextmanager
def crossover(on: bool):
    """The measured plan as it is, or with its crossovers removed (oneDNN at every size where chosen)."""
    measured = linear_module.training_kernels
    if not on:
        linear_module.training_kernels = lambda dtype=torch.float32: dataclasses.replace(measured(dtype), onednn_from={})
    try:
        yield
    finally:
        linear_module.training_kernels = measured


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", nargs="+", type=int, default=[1, 32])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    plan = linear_module.training_kernels(torch.float32)
    print(f"plan (1 thread, fp32): forward {plan.forward}, input_grad {plan.input_grad}, weight_grad "
          f"{plan.weight_grad}; oneDNN from {plan.onednn_from} multiply-adds\n")
    ours, peer = create_model("vit_tiny_patch16_224", **CONFIG), timm.create_model("vit_tiny_patch16_224", **CONFIG)
    share_weights(ours, peer)
    variants = {"ours": (ours, True), "ours, no crossover": (ours, False), "timm": (peer, True)}
    print("| batch | " + " | ".join(f"{v} ms" for v in variants) + " | timm / ours | timm / no crossover |")
    print("| ---: | " + " | ".join("---:" for _ in variants) + " | ---: | ---: |")
    for batch in args.batch:
        gen = torch.Generator().manual_seed(0)
        x, y = torch.randn(batch, 3, 16, 16, generator=gen), torch.randint(0, 10, (batch,), generator=gen)
        opts = {v: torch.optim.AdamW(m.parameters(), lr=1e-3, fused=True) for v, (m, _) in variants.items()}

        def step(v: str) -> None:
            model, on = variants[v]
            with crossover(on):
                opts[v].zero_grad(set_to_none=True)
                F.cross_entropy(model(x), y).backward()
                opts[v].step()

        times: dict[str, list[float]] = {v: [] for v in variants}
        for r in range(args.rounds + 1):
            for v in (list(variants) if r % 2 == 0 else list(variants)[::-1]):
                start = time.perf_counter()
                for _ in range(args.steps):
                    step(v)
                if r:  # round 0 warms up
                    times[v].append((time.perf_counter() - start) / args.steps)
        ms = {v: statistics.median(t) * 1e3 for v, t in times.items()}
        print(f"| {batch} | " + " | ".join(f"{ms[v]:.2f}" for v in variants)
              + f" | {ms['timm'] / ms['ours']:.2f} | {ms['timm'] / ms['ours, no crossover']:.2f} |")
    print("\n(timm / ours: timm's time over ours, above 1 where ours is faster)\n")
    print("| product (M x K -> N) | MACs (M) | " + " | ".join(f"{p} aten / oneDNN us" for p in linear_module.KERNELS) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in linear_module.KERNELS) + " |")
    for M, K, N in [(16, 128, 384), (16, 128, 512), (16, 512, 128), (512, 128, 384), (512, 128, 512), (512, 512, 128)]:
        ops = linear_module.product_operands(torch.float32, (M, K, N))
        cells = []
        for product, operands in ops.items():
            kernels = linear_module.KERNELS[product]
            sec = linear_module.median_seconds({k: lambda fn=fn: fn(*operands) for k, fn in kernels.items()},
                                               args.rounds, time.thread_time, repeat=20)
            cells.append(f"{sec['aten'] * 1e6:.1f} / {sec['onednn'] * 1e6:.1f}")
        print(f"| {M} x {K} -> {N} | {M * K * N / 1e6:.1f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
