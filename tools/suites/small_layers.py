"""Small layers on the CPU: the training step of the demo's ViT (4 blocks of width 128, 17 tokens: 16
patches and the class token; 1 thread) under the measured kernel plan of vision_attn.kernels (its
crossovers: products below them through ATen), under the same plan with every product the self-check
chose for oneDNN at every size (no crossover), and timm's model of the same configuration, in one
process, alternating, the same weights; then each product's two kernels at the layer sizes of that
model.

    python tools/bench.py small-layers --batch 1 32 --rounds 15
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from tools.suites.harness import CLOCKS, Param, Suite, alternate, median, median_ms

CONFIG = dict(img_size=16, patch_size=4, embed_dim=128, depth=4, num_heads=4, num_classes=10, global_pool="avg")
PRODUCT_SHAPES = [(16, 128, 384), (16, 128, 512), (16, 512, 128), (512, 128, 384), (512, 128, 512), (512, 512, 128)]


def without_crossovers(plan):
    """``plan`` (resolved) with its crossovers removed: oneDNN at every size where it was chosen."""
    from vision_attn.kernels import KernelPlan

    return KernelPlan(plan.name, {
        dtype: dataclasses.replace(choice, linear=dataclasses.replace(choice.linear, onednn_from={}))
        for dtype, choice in plan.resolved().choices.items()})


def run(p, record) -> None:
    import timm

    from vision_attn.analysis.benchmark import share_weights
    from vision_attn.kernels import KernelPlan, kernel_plan
    from vision_attn.kernels.measure import product_operands  # kernel internals: the self-check's operands
    from vision_attn.kernels.onednn import PRODUCTS
    from vision_attn.models import create_model

    torch.set_num_threads(1)
    measured = KernelPlan("measured").resolved()  # measured at 1 thread (or read from the cache)
    plans = {True: measured, False: without_crossovers(measured)}
    plan = measured.choice(torch.float32).linear
    record.results["plan"] = {"forward": plan.forward, "input_grad": plan.input_grad, "weight_grad": plan.weight_grad,
                              "onednn_from": {str(k): v for k, v in dict(plan.onednn_from).items()}}
    record.line(f"plan (1 thread, fp32): forward {plan.forward}, input_grad {plan.input_grad}, weight_grad "
                f"{plan.weight_grad}; oneDNN from {dict(plan.onednn_from)} multiply-adds\n")
    ours, peer = create_model("vit_tiny_patch16_224", **CONFIG), timm.create_model("vit_tiny_patch16_224", **CONFIG)
    share_weights(ours, peer)
    variants = {"ours": (ours, True), "ours, no crossover": (ours, False), "timm": (peer, True)}
    lines = []
    for batch in p.batch:
        gen = torch.Generator().manual_seed(0)
        x, y = torch.randn(batch, 3, 16, 16, generator=gen), torch.randint(0, 10, (batch,), generator=gen)
        opts = {v: torch.optim.AdamW(m.parameters(), lr=1e-3, fused=True) for v, (m, _) in variants.items()}

        def step(v: str) -> None:
            model, on = variants[v]
            with kernel_plan(plans[on]):
                opts[v].zero_grad(set_to_none=True)
                F.cross_entropy(model(x), y).backward()
                opts[v].step()

        ms = median_ms(alternate({v: (lambda v=v: step(v)) for v in variants}, p.rounds, iters=p.steps,
                                 warmup_rounds=1))
        row = record.add("steps", {"batch": batch, **{f"{v} ms": ms[v] for v in variants},
                                   "timm / ours": ms["timm"] / ms["ours"],
                                   "timm / no crossover": ms["timm"] / ms["ours, no crossover"]})
        lines.append([batch] + [f"{v:.2f}" for v in list(row.values())[1:]])
    record.table(["batch"] + [f"{v} ms" for v in variants] + ["timm / ours", "timm / no crossover"], lines,
                 "training step (timm / ours: timm's time over ours, above 1 where ours is faster)")
    lines = []
    for M, K, N in PRODUCT_SHAPES[:p.products]:
        ops = product_operands(torch.float32, (M, K, N))
        row = {"product": f"{M} x {K} -> {N}", "macs_m": M * K * N / 1e6}
        cells = []
        for product, operands in ops.items():
            times = alternate({k: lambda fn=fn: fn(*operands) for k, fn in PRODUCTS[product].items()}, p.rounds,
                              iters=20, clock=CLOCKS["thread"], warmup_calls=1)
            sec = {k: median(v) for k, v in times.items()}
            row[product] = {"aten_us": sec["aten"] * 1e6, "onednn_us": sec["onednn"] * 1e6}
            cells.append(f"{sec['aten'] * 1e6:.1f} / {sec['onednn'] * 1e6:.1f}")
        record.add("products", row)
        lines.append([row["product"], f"{row['macs_m']:.1f}", *cells])
    record.table(["product (M x K -> N)", "MACs (M)"] + [f"{p} aten / oneDNN us" for p in PRODUCTS], lines)


SUITE = Suite("small-layers", "the demo ViT's training step: the measured plan's crossovers, oneDNN everywhere, timm",
              run, (
                  Param("batch", [1, 32], "batch sizes", quick=[1]),
                  Param("rounds", 15, "timed alternating rounds", quick=1),
                  Param("steps", 10, "training steps a round", quick=1),
                  Param("products", len(PRODUCT_SHAPES), "how many of the product shapes to time", quick=1),
              ), requires=("timm",), doc=__doc__)
