"""Multi-scale deformable attention on the CPU: vision_attn's ``multi_scale_deformable_attn`` and
``MultiScaleDeformableAttention`` against ultralytics' ``multi_scale_deformable_attn_pytorch`` and
``MSDeformAttn`` (its state dict loaded into ours), at RT-DETR's decoder sizes: 300 queries, d_model
256, 8 heads, 4 points, 3 levels (80x80, 40x40, 20x20 at 640 px; 20x20, 10x10, 5x5 at 160 px).

One process, the same inputs, alternating rounds; each round times every variant over ``--steps``
calls, and the table gives the median time and the median of the per-round ratios (ultralytics /
ours: above 1, ours is faster). Forward in eval mode under no_grad, and forward + backward.

    python tools/bench.py deformable-attention                           # 2 threads, wall clock
    python tools/bench.py deformable-attention --threads 1 --clock cpu
"""
from __future__ import annotations

from typing import Callable

import torch

from tools.suites.harness import CLOCKS, Param, Suite, alternate, median_ms, median_ratio

QUERIES, D_MODEL, HEADS, POINTS = 300, 256, 8, 4
LEVELS = {640: [(80, 80), (40, 40), (20, 20)], 160: [(20, 20), (10, 10), (5, 5)]}


def function_variants(batch: int, levels: list[tuple[int, int]], train: bool) -> dict[str, Callable[[], object]]:
    from ultralytics.nn.modules.utils import multi_scale_deformable_attn_pytorch

    from vision_attn.layers import multi_scale_deformable_attn

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

    from vision_attn.kernels import deformable_sample

    ours = lambda *a: multi_scale_deformable_attn(*a, deformable_sample)  # noqa: E731 (the fast path's sampling)
    return {"ours": run(ours, False),
            "ultralytics": run(multi_scale_deformable_attn_pytorch, True)}


def module_variants(batch: int, levels: list[tuple[int, int]], train: bool) -> dict[str, Callable[[], object]]:
    from ultralytics.nn.modules.transformer import MSDeformAttn

    from vision_attn.kernels import accelerate
    from vision_attn.layers import MultiScaleDeformableAttention

    torch.manual_seed(0)
    peer = MSDeformAttn(D_MODEL, len(levels), HEADS, POINTS)
    ours = MultiScaleDeformableAttention(D_MODEL, len(levels), HEADS, POINTS)
    ours.load_state_dict(peer.state_dict())
    accelerate(ours)  # the CPU fast paths, as training runs it
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


def run(p, record) -> None:
    from tools.ultralytics_env import quiet_ultralytics_environment
    from vision_attn.kernels import kernel_plan

    quiet_ultralytics_environment()
    torch.set_num_threads(p.threads)
    record.line(f"torch {torch.__version__}, {p.threads} threads, {p.rounds} rounds of {p.steps} calls, "
                f"kernel plan {p.kernels}, {p.clock} clock\n")
    lines = []
    with kernel_plan(p.kernels):
        for what, build in (("function", function_variants), ("module", module_variants)):
            for train in (False, True):
                for size in p.sizes:
                    levels = LEVELS[size]
                    for batch in p.batch:
                        times = alternate(build(batch, levels, train), p.rounds, iters=p.steps, warmup_calls=1,
                                          clock=CLOCKS["cpu" if p.clock == "cpu" else "wall"])
                        ms = median_ms(times)
                        ratio = median_ratio(times, "ultralytics", "ours")
                        shapes = ", ".join(f"{h}x{w}" for h, w in levels)
                        record.add("rows", {"what": what, "train": train, "img_size": size, "batch": batch,
                                            "ours_ms": ms["ours"], "ultralytics_ms": ms["ultralytics"],
                                            "ultralytics_over_ours": ratio})
                        lines.append([what, "forward + backward" if train else "forward (eval)",
                                      f"{size} px ({shapes})", batch, f"{ms['ours']:.2f}", f"{ms['ultralytics']:.2f}",
                                      f"{ratio:.2f}"])
    record.table(["what", "pass", "image (levels)", "batch", "ours ms", "ultralytics ms", "ultralytics / ours"], lines)


SUITE = Suite("deformable-attention", "multi-scale deformable attention against ultralytics' (function and module)",
              run, (
                  Param("threads", 2, "torch threads", quick=1),
                  Param("rounds", 15, "alternating rounds", quick=1),
                  Param("steps", 5, "calls a round", quick=1),
                  Param("batch", [1, 4], "batch sizes", quick=[1]),
                  Param("sizes", [640, 160], "image sizes (their levels)", choices=list(LEVELS), quick=[160]),
                  Param("kernels", "measured", "vision_attn's kernel plan for the module's linear layers",
                        choices=["measured", "aten", "onednn"]),
                  Param("clock", "wall", "wall: elapsed time; cpu: the process's CPU time (steadier on a shared "
                        "machine at --threads 1)", choices=["wall", "cpu"]),
              ), requires=("ultralytics",), doc=__doc__)
