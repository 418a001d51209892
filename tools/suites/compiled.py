"""Ours under ``torch.compile`` against timm's under ``torch.compile`` (Inductor, CPU), same weights, in one
process, alternating.

    python tools/bench.py compiled --models vit_base_patch16_224 swin_tiny_patch4_window7_224 --batch 8 --threads 2
    python tools/bench.py compiled --threads 1 --clock cpu --modes train --rounds 9   # 1 thread, CPU time
    python tools/bench.py compiled --profile                                         # and the kernels each runs

For each model, timm's (random weights) and ours with timm's weights loaded (``share_weights``), both
without stochastic depth, eager outputs compared first (the comparison is void if they differ). Each mode (``--modes``: ``infer``, a
forward pass under ``torch.inference_mode``; ``train``, forward, cross-entropy, backward and torch's SGD
step on both sides, the model compiled, the optimizer not; ``--precision bf16``: under bf16 autocast)
compiles both models with ``torch.compile(model, mode=--compile-mode)`` (Inductor): the first call (compiling and running once) is
timed apart, then ``--warmup`` calls, then ``--rounds`` rounds of ``--iters`` calls, the order
alternating every round; the figure to quote is the median over rounds of ours/timm throughput.
Compiling starts cold (Inductor's caches disabled, ``torch.compiler.config.force_disable_caches``;
``--caches`` keeps them), after a warm-up compile of a small module so that neither side pays the
one-time start of the compiler. Recorded with the times: the Dynamo graphs and graph breaks each
compile made, recompiles during the timed calls (should be 0), the compiled outputs' difference, and
with ``--profile`` each side's ATen calls (count and self time of one call of the compiled step:
which kernels Inductor left as library calls, e.g. ``addmm``, ``bmm``, the fused attention).

``--accelerated``: ours through :func:`vision_attn.kernels.accelerate` before compiling, as the training
runner compiles it (``model.compile: true``); its CPU kernels step aside while a graph is captured
(:mod:`vision_attn.kernels.capture`), so Dynamo captures standard operations only. ``--clock cpu``
is the calling thread's CPU time (with ``--threads 1``: robust to other processes).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F

from tools.suites.harness import CLOCKS, Param, Suite, alternate, log

SIDES = ("ours", "timm")


def build(name: str, img: int, accelerated: bool) -> dict[str, torch.nn.Module]:
    """timm's model and ours with its weights; no stochastic depth (its random draws differ between the
    two, so that training outputs could not be compared; the work is the same with it)."""
    import timm

    import vision_attn
    from vision_attn.analysis.benchmark import share_weights
    from vision_attn.kernels import accelerate

    torch.manual_seed(0)
    peer = timm.create_model(name, pretrained=False, img_size=img, drop_path_rate=0.0)
    ours = vision_attn.create_model(name, img_size=img, drop_path_rate=0.0)
    if not share_weights(ours, peer):
        raise SystemExit(f"{name}: timm's state dict does not load into ours; the comparison needs the same weights")
    return {"ours": accelerate(ours) if accelerated else ours, "timm": peer}


class Step:
    """One side's compiled inference pass or training step on fixed inputs."""

    def __init__(self, model: torch.nn.Module, mode: str, batch: int, img: int, compile_mode: str,
                 precision: str = "fp32") -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(batch, 3, img, img, generator=g)
        self.y = torch.randint(0, 1000, (batch,), generator=g)
        self.model, self.train = model.train(mode == "train"), mode == "train"
        self.fn = torch.compile(model, mode=None if compile_mode == "default" else compile_mode)
        self.opt = torch.optim.SGD(model.parameters(), lr=1e-4) if self.train else None
        self.bf16 = precision == "bf16"

    def __call__(self) -> torch.Tensor:
        with torch.autocast("cpu", torch.bfloat16, enabled=self.bf16):
            if not self.train:
                with torch.inference_mode():
                    return self.fn(self.x).float()
            out = self.fn(self.x)
            loss = F.cross_entropy(out.float(), self.y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return out.detach()


def _dynamo_counts() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return {"graphs": counters["stats"]["unique_graphs"], "breaks": sum(counters["graph_break"].values()),
            "frames": counters["frames"]["ok"]}


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


def _warm_up_compiler() -> None:
    """Compile and run a small module once: the compiler's one-time start (imports, the C++ toolchain
    check) then counts for neither side."""
    small = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    torch.compile(small)(torch.randn(2, 8))
    torch._dynamo.reset()


def aten_calls(fn: Callable[[], object]) -> dict[str, dict[str, float]]:
    """ATen calls of one call of ``fn``: name -> count and self milliseconds (the profiler's top level
    ops inside the compiled graph: the library kernels Inductor calls; its own fused kernels are the
    ``CompiledFxGraph`` rows)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    out = {}
    for e in prof.key_averages():
        if e.key.startswith("aten::") or "CompiledFxGraph" in e.key:
            key = "Inductor's kernels (CompiledFxGraph)" if "CompiledFxGraph" in e.key else e.key
            row = out.setdefault(key, {"calls": 0, "self_ms": 0.0})
            row["calls"] += e.count
            row["self_ms"] += e.self_cpu_time_total / 1e3
    return out


def measure(name: str, mode: str, p, clock: Callable[[], float]) -> dict:
    """Both sides of one model in one mode: outputs compared, compiled, warmed up, timed alternating."""
    models = build(name, p.img_size, p.accelerated)
    steps = {side: Step(models[side], mode, p.batch, p.img_size, p.compile_mode, p.precision) for side in SIDES}
    with torch.inference_mode():  # eager, before any step changes the weights
        eager = {side: models[side].eval()(steps[side].x) for side in SIDES}
    eager_diff = (eager["ours"] - eager["timm"]).abs().max().item()
    if eager_diff > 1e-4:
        raise SystemExit(f"{name}: ours and timm's outputs differ by {eager_diff:.2e}: the comparison is void")
    first, counts, outs = {}, {}, {}
    for side in SIDES:
        models[side].train(mode == "train")
        before = _dynamo_counts()
        start = time.perf_counter()
        outs[side] = steps[side]()
        first[side] = time.perf_counter() - start
        counts[side] = _delta(_dynamo_counts(), before)
        log(f"{name} {mode} {side}: compiled and ran once in {first[side]:.1f} s "
            f"({counts[side]['graphs']} graphs, {counts[side]['breaks']} graph breaks)")
    for _ in range(p.warmup):
        for side in SIDES:
            steps[side]()
    before = _dynamo_counts()
    times = alternate(dict(steps), p.rounds, iters=p.iters, clock=clock, log=log)
    recompiles = _delta(_dynamo_counts(), before)["frames"]
    rates = {k: [p.batch / t for t in v] for k, v in times.items()}
    ratios = [o / t for o, t in zip(rates["ours"], rates["timm"])]
    row = {"model": name, "mode": mode, "batch": p.batch, "img_size": p.img_size, "precision": p.precision,
           "eager_max_abs_diff": eager_diff, "compiled_max_abs_diff": (outs["ours"] - outs["timm"]).abs().max().item(),
           "first_call_s": {k: round(v, 2) for k, v in first.items()},
           "dynamo": counts, "recompiles_while_timed": recompiles,
           "img_s_median": {k: statistics.median(v) for k, v in rates.items()},
           "ms_median": {k: 1e3 * statistics.median(v) for k, v in times.items()},
           "ratio_median": statistics.median(ratios), "ratios": [round(r, 3) for r in ratios]}
    if p.profile:
        row["aten_calls"] = {side: aten_calls(steps[side]) for side in SIDES}
    torch._dynamo.reset()
    return row


def run(p, record) -> None:
    torch.set_num_threads(p.threads)
    if p.clock == "cpu" and p.threads != 1:
        raise SystemExit("--clock cpu measures the calling thread only: use it with --threads 1")
    if not p.caches:
        torch.compiler.config.force_disable_caches = True
    _warm_up_compiler()
    record.results.update({"threads": torch.get_num_threads(), "clock": p.clock, "compile_mode": p.compile_mode,
                           "accelerated": p.accelerated, "caches": p.caches})
    rows = []
    for name in p.models:
        for mode in p.modes:
            rows.append(record.add("rows", measure(name, mode, p, CLOCKS["thread" if p.clock == "cpu" else "wall"])))
            record.save()
    record.table(
        ["model", "mode", "batch", "ours img/s", "timm img/s", "ours / timm", "first call s (ours / timm)",
         "graphs / breaks (ours / timm)", "recompiles", "compiled max abs diff"],
        [[r["model"], "inference" if r["mode"] == "infer" else "training step", r["batch"],
          f"{r['img_s_median']['ours']:.2f}", f"{r['img_s_median']['timm']:.2f}", f"{r['ratio_median']:.3f}",
          f"{r['first_call_s']['ours']:.0f} / {r['first_call_s']['timm']:.0f}",
          f"{r['dynamo']['ours']['graphs']}/{r['dynamo']['ours']['breaks']} / "
          f"{r['dynamo']['timm']['graphs']}/{r['dynamo']['timm']['breaks']}",
          r["recompiles_while_timed"], f"{r['compiled_max_abs_diff']:.1e}"] for r in rows],
        f"torch.compile (mode {p.compile_mode}, Inductor) on the CPU, {p.precision}, {p.img_size} px, "
        f"{torch.get_num_threads()} threads, "
        f"{p.clock} clock, median of {p.rounds} alternating rounds x {p.iters}; ours "
        f"{'accelerated' if p.accelerated else 'plain'}; training: cross-entropy, backward, SGD")
    for r in rows:
        if "aten_calls" not in r:
            continue
        calls = r["aten_calls"]
        names = sorted(set(calls["ours"]) | set(calls["timm"]),
                       key=lambda k: -max(calls[s].get(k, {"self_ms": 0})["self_ms"] for s in SIDES))
        cell = lambda s, k: (f"{calls[s][k]['calls']} / {calls[s][k]['self_ms']:.1f}" if k in calls[s] else "-")
        record.table(["ATen call", "ours: calls / self ms", "timm: calls / self ms"],
                     [[k, cell("ours", k), cell("timm", k)] for k in names[:p.profile_rows]],
                     f"{r['model']} {r['mode']}: one profiled call")


SUITE = Suite("compiled", "ours against timm, both under torch.compile (Inductor, CPU): inference and a training step",
              run, (
    Param("models", ["vit_base_patch16_224", "swin_tiny_patch4_window7_224"], "models (timm names)",
          quick=["vit_tiny_patch16_224"]),
    Param("modes", ["infer", "train"], "infer: inference passes; train: training steps", quick=["infer"]),
    Param("batch", 8, "images a call", quick=1),
    Param("img_size", 224, "pixels", quick=32),
    Param("threads", 2, "torch threads (set before compiling: Inductor's kernels take it)", quick=1),
    Param("clock", "wall", "wall time, or cpu: the calling thread's CPU time (with --threads 1)",
          choices=["wall", "cpu"]),
    Param("rounds", 7, "alternating rounds", quick=1),
    Param("iters", 1, "calls a round"),
    Param("warmup", 2, "untimed calls of each side after the first", quick=1),
    Param("precision", "fp32", "fp32, or bf16: bf16 autocast (what Lightning's bf16-mixed runs)", choices=["fp32", "bf16"]),
    Param("compile_mode", "default", "torch.compile's mode",
          choices=["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]),
    Param("caches", False, "keep Inductor's caches (default: compile cold, so the first call is the whole compile)"),
    Param("accelerated", False, "ours through kernels.accelerate before compiling, as the training runner compiles it"),
    Param("profile", False, "also profile one call of each side: the ATen calls in the compiled step"),
    Param("profile_rows", 12, "rows of the profile tables"),
), requires=("timm",), doc=__doc__)
