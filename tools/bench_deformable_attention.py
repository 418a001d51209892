"""Multi-scale deformable attention on the CPU: vision_attn's ``multi_scale_deformable_attn`` and
``MultiScaleDeformableAttention`` against ultralytics' ``multi_scale_deformable_attn_pytorch`` and
``MSDeformAttn`` (its state dict loaded into ours), at RT-DETR's decoder sizes: 300 queries, d_model
256, 8 heads, 4 points, 3 levels (80x80, 40x40, 20x20 at 640 px; 20x20, 10x10, 5x5 at 160 px).

One process, the same inputs, alternating rounds; each round times every variant over ``--steps``
calls, and the table gives the median time and the median of the per-round ratios (ultralytics /
ours: above 1, ours is faster). Forward in eval mode under no_grad, and forward + backward.

    .venv/bin/python tools/bench_deformable_attention.py [--threads 2] [--rounds 15] [--steps 5] [--clock wall]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable

import torch
from ultralytics.nn.modules.transformer import MSDeformAttn
from ultralytics.nn.modules.utils import multi_scale_deformable_attn_pytorch

from vision_attn.kernels import kernel_plan
from vision_attn.layers import MultiScaleDeformableAttention, multi_scale_deformable_attn

QUERIES, D_MODEL, HEADS, POINTS = 300, 256, 8, 4
LEVELS = {640: [(80, 80), (40, 40), (20, 20)], 160: [(20, 20), (10, 10), (5, 5)]}


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def seconds(fn: Callable[[], object], steps: int, clock: Callable[[], float]) -> float:
    start = clock()
    for _ in range(steps):
        fn()
    return (clock() - start) / steps


def compare(variants: dict[str, Callable[[], object]], rounds: int, steps: int,
            clock: Callable[[], float]) -> tuple[float, float, float]:
    """(ours ms, ultralytics ms, median of per-round ratios ultralytics / ours), alternating rounds."""
    for fn in variants.values():  # warm up
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for k in order:
            times[k].append(seconds(variants[k], steps, clock))
    ratios = [u / o for o, u in zip(times["ours"], times["ultralytics"])]
    return (statistics.median(times["ours"]) * 1e3, statistics.median(times["ultralytics"]) * 1e3,
            statistics.median(ratios))


def function_variants(batch: int, levels: list[tuple[int, int]], train: bool) -> dict[str, Callable[[], object]]:
    gen = torch.Generator().manual_seed(0)
    tokens, n_levels = sum(h * w for h, w in levels), len(levels)
    value = torch.randn(batch, tokens, HEADS, D_MODEL // HEADS, generator=gen)
    loc = torch.rand(batch, QUERIES, HEADS, n_levels, POINTS, 2, generator=gen) * 1.2 - 0.1
    attn = torch.rand(batch, QUERIES, HEADS, n_levels, POINTS, generator=gen).flatten(3).softmax(-1).unflatten(
        -1, (n_levels, POINTS))
    for t in (value, loc, attn):
        t.requires_grad_(train)

    def run(fn: Callable[..., torch.Tensor], folded: bool) -> Callable[[], object]:
        args = (value, levels, loc.flatten(3, 4), attn.flatten(3)) if folded else (value, levels, loc, attn)

        def step() -> object:
            if not train:
                with torch.no_grad():
                    return fn(*args)
            out = fn(*args)
            return torch.autograd.grad(out, (value, loc, attn), torch.ones_like(out))
        return step

    return {"ours": run(multi_scale_deformable_attn, False),
            "ultralytics": run(multi_scale_deformable_attn_pytorch, True)}


def module_variants(batch: int, levels: list[tuple[int, int]], train: bool) -> dict[str, Callable[[], object]]:
    torch.manual_seed(0)
    peer = MSDeformAttn(D_MODEL, len(levels), HEADS, POINTS)
    ours = MultiScaleDeformableAttention(D_MODEL, len(levels), HEADS, POINTS)
    ours.load_state_dict(peer.state_dict())
    gen = torch.Generator().manual_seed(0)
    tokens = sum(h * w for h, w in levels)
    query = torch.randn(batch, QUERIES, D_MODEL, generator=gen)
    boxes = torch.rand(batch, QUERIES, 1, 4, generator=gen)
    value = torch.randn(batch, tokens, D_MODEL, generator=gen)

    def run(model: torch.nn.Module) -> Callable[[], object]:
        model.train(train)

        def step() -> object:
            if not train:
                with torch.no_grad():
                    return model(query, boxes, value, levels)
            model.zero_grad(set_to_none=True)
            out = model(query, boxes, value, levels)
            out.sum().backward()
            return out
        return step

    return {"ours": run(ours), "ultralytics": run(peer)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--kernels", default="measured", choices=["measured", "aten", "onednn"],
                    help="vision_attn's kernel plan for the module's linear layers")
    ap.add_argument("--clock", default="wall", choices=list(CLOCKS),
                    help="wall: elapsed time; cpu: the process's CPU time (steadier on a shared machine at "
                         "--threads 1; at more threads it counts the threads' waiting too)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"`{' '.join(['.venv/bin/python', *sys.argv])}`: torch {torch.__version__}, {args.threads} threads, "
          f"{args.rounds} rounds of {args.steps} calls, kernel plan {args.kernels}, {args.clock} clock\n")
    print("| what | pass | image (levels) | batch | ours ms | ultralytics ms | ultralytics / ours |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    with kernel_plan(args.kernels):
        for what, build in (("function", function_variants), ("module", module_variants)):
            for train in (False, True):
                for size, levels in LEVELS.items():
                    for batch in args.batch:
                        ours, peer, ratio = compare(build(batch, levels, train), args.rounds, args.steps,
                                                     CLOCKS[args.clock])
                        shapes = ", ".join(f"{h}x{w}" for h, w in levels)
                        print(f"| {what} | {'forward + backward' if train else 'forward (eval)'} | {size} px "
                              f"({shapes}) | {batch} | {ours:.2f} | {peer:.2f} | {ratio:.2f} |", flush=True)


if __name__ == "__main__":
    main()
