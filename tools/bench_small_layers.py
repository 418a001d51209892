"""Small layers on the CPU: the training step of the demo's ViT (4 blocks of width 128, 17 tokens: 16
patches and the class token; 1 thread) under the measured kernel plan of vision_attn.kernels (its
crossovers: products below them through ATen), under the same plan with every product the self-check
chose for oneDNN at every size (the behaviour before the crossover), and timm's model of the same
configuration, in one process, alternating, the same weights; then each product's two kernels at the
layer sizes of that model.

    .venv/bin/python tools/bench_small_layers.py [--batch 1 32] [--rounds 15]
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import timm
import torch
import torch.nn.functional as F

from vision_attn.analysis.benchmark import share_weights
from vision_attn.kernels import KernelPlan, kernel_plan
from vision_attn.kernels.measure import product_operands
from vision_attn.kernels.onednn import PRODUCTS
from vision_attn.kernels.timing import median_seconds
from vision_attn.models import create_model

CONFIG = dict(img_size=16, patch_size=4, embed_dim=128, depth=4, num_heads=4, num_classes=10, global_pool="avg")


def without_crossovers(plan: KernelPlan) -> KernelPlan:
    """``plan`` (resolved) with its crossovers removed: oneDNN at every size where it was chosen."""
    return KernelPlan(plan.name, {
        dtype: dataclasses.replace(choice, linear=dataclasses.replace(choice.linear, onednn_from={}))
        for dtype, choice in plan.resolved().choices.items()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", nargs="+", type=int, default=[1, 32])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    measured = KernelPlan("measured").resolved()  # measured at 1 thread (or read from the cache)
    plans = {True: measured, False: without_crossovers(measured)}
    plan = measured.choice(torch.float32).linear
    print(f"plan (1 thread, fp32): forward {plan.forward}, input_grad {plan.input_grad}, weight_grad "
          f"{plan.weight_grad}; oneDNN from {dict(plan.onednn_from)} multiply-adds\n")
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
            with kernel_plan(plans[on]):
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
    print("| product (M x K -> N) | MACs (M) | " + " | ".join(f"{p} aten / oneDNN us" for p in PRODUCTS) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in PRODUCTS) + " |")
    for M, K, N in [(16, 128, 384), (16, 128, 512), (16, 512, 128), (512, 128, 384), (512, 128, 512), (512, 512, 128)]:
        ops = product_operands(torch.float32, (M, K, N))
        cells = []
        for product, operands in ops.items():
            kernels = PRODUCTS[product]
            sec = median_seconds({k: lambda fn=fn: fn(*operands) for k, fn in kernels.items()},
                                 args.rounds, time.thread_time, repeat=20)
            cells.append(f"{sec['aten'] * 1e6:.1f} / {sec['onednn'] * 1e6:.1f}")
        print(f"| {M} x {K} -> {N} | {M * K * N / 1e6:.1f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
