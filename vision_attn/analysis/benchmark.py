"""Timing and memory of models: throughput, latency (median and p90 after warm-up), peak memory and
model FLOP utilisation (MFU) against a matrix-multiply peak measured on the same device.

Machines are noisy (on a shared CPU the same run differs by 25% between processes), so models are
compared in one process, alternating their order every round; the figure to quote for two of them is
the median over rounds of the ratio of their throughputs (:func:`median_ratio`). On CUDA each call is
timed with CUDA events and the device is synchronised before the times are read; on the CPU with
``time.perf_counter``. Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` above what was
allocated before the call; on the CPU the peak of live tensor storage created by the call, tracked op by
op (:class:`PeakTensorMemory`, deterministic), or for a compiled model the rise of the resident set
(:func:`rss_rise_mb`), which the op-by-op tracker cannot see inside a compiled graph.
"""
from __future__ import annotations

import contextlib
import math
import os
import statistics
import threading
import time
import weakref
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from vision_attn.analysis.flops import flop_counter
from vision_attn.errors import ConfigError
from vision_attn.kernels import (KernelPlan, accelerate, current_plan, example_images, fused_linear, judged_plan, kernel_plan,
                                 needs_kernels)
from vision_attn.optimizers import OPTIMIZERS, build_optimizer

__all__ = [
    "BenchResult", "PeakTensorMemory", "alternate", "benchmark_models", "call_seconds", "matmul_peak",
    "median_ratio", "percentile", "rss_mb", "rss_peak_mb", "rss_rise_mb", "share_weights", "tensor_peak_mb",
    "timm_twin", "timm_optimizer", "trainer_optimizer", "torch_optimizer", "PRECISIONS", "on_fast_paths",
]

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


# ------------------------------------------------------------------------------------------------
# memory
def rss_mb() -> float:
    """Resident set of this process, MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_during(fn: Callable[[], object]) -> float:
    """Highest resident set (MiB) seen by a thread sampling every 0.1 ms while ``fn()`` runs."""
    peak, done = [0.0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb())
            time.sleep(1e-4)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        fn()
    finally:
        done.set()
        sampler.join()
    return max(peak[0], rss_mb())


def rss_rise_mb(fn: Callable[[], object]) -> float:
    """Steady-state rise of the resident set while ``fn()`` runs: call it once first (kernels
    selected, caches filled), then sample the resident set from a thread during a second call."""
    fn()
    before = rss_mb()
    return _peak_rss_during(fn) - before


def rss_peak_mb(fn: Callable[[], object], calls: int = 2) -> float:
    """Peak of the resident set above its level before the first call, over ``calls`` calls of
    ``fn()``. Unlike :func:`rss_rise_mb` it does not depend on how much memory the allocator kept
    between calls, which differs between implementations in training."""
    before = rss_mb()

    def run() -> None:
        for _ in range(calls):
            fn()

    return _peak_rss_during(run) - before


class PeakTensorMemory(TorchDispatchMode):
    """Peak bytes of live tensor storage created by the ops run inside the mode (deterministic,
    unlike the resident set): each op output's storage counts from its creation until the last
    Python tensor viewing it is freed. Tensors made before the mode (weights, inputs) do not count."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list[int]] = {}  # data_ptr -> [bytes, tensors alive]
        self.current = self.peak = 0

    def _release(self, ptr: int) -> None:
        self.live[ptr][1] -= 1
        if self.live[ptr][1] == 0:
            self.current -= self.live.pop(ptr)[0]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                ptr = storage.data_ptr()
                if ptr not in self.live:
                    self.live[ptr] = [storage.nbytes(), 0]
                    self.current += storage.nbytes()
                    self.peak = max(self.peak, self.current)
                self.live[ptr][1] += 1
                weakref.finalize(t, self._release, ptr)
        return out


def tensor_peak_mb(fn: Callable[[], object]) -> float:
    """Peak live tensor storage (MiB) of the ops ``fn()`` runs, forward and backward alike."""
    with PeakTensorMemory() as mem:
        fn()
    return mem.peak / 2**20


def _cuda_peak_mb(fn: Callable[[], object]) -> float:
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


# ------------------------------------------------------------------------------------------------
# time
def call_seconds(fn: Callable[[], object], calls: int, device: str | torch.device = "cpu") -> list[float]:
    """Seconds of each of ``calls`` calls of ``fn()``. CUDA: events around each call, read after one
    synchronisation at the end (no sync between calls); elsewhere ``time.perf_counter``."""
    if torch.device(device).type == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / 1e3 for start, end in events]
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linearly interpolated."""
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def alternate(steps: dict[str, Callable[[], object]], rounds: int, iters: int, items: int,
              log: Callable[[str], None] | None = None,
              clock: Callable[[], float] = time.perf_counter) -> list[dict[str, float]]:
    """Time each step ``iters`` times a round, alternating the order every round; returns one dict
    of items per second per step and round (``items`` per call: the batch size).

    ``clock``: wall time by default. With one torch thread, ``time.thread_time`` (the CPU time of the
    calling thread, where all the work then runs) is immune to other processes taking the core away."""
    names = list(steps)
    rows = []
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        row = {}
        for name in order:
            start = clock()
            for _ in range(iters):
                steps[name]()
            row[name] = iters * items / (clock() - start)
        rows.append(row)
        if log:
            log(f"round {r}: " + "  ".join(f"{n} {row[n]:.2f}/s" for n in names))
    return rows


def median_ratio(rows: list[dict[str, float]], a: str, b: str) -> float:
    """Median over rounds of rows[a] / rows[b]."""
    return statistics.median(r[a] / r[b] for r in rows)


def matmul_peak(device: str | torch.device = "cpu", precision: str = "fp32", n: int | None = None,
                iters: int = 5) -> float:
    """Matrix-multiply throughput (FLOP/s, 2 n³ per product) on square ``n x n`` matrices in
    ``precision`` on ``device``: the peak that MFU is measured against. It is the fastest product
    PyTorch offers there: ``torch.matmul``, and the linear kernel of the ``"onednn"`` plan, which our
    layers use at inference on the CPU (:mod:`vision_attn.kernels`; on some CPUs it runs about twice as
    fast as MKL's ``matmul``, so a peak from ``matmul`` alone would put MFU above 100%). Default n: 8192 on CUDA, 2048
    elsewhere; the fastest of ``iters`` products after two warm-up products (a peak is a best case, and
    on a shared machine the median would understate it)."""
    device = torch.device(device)
    n = n or (8192 if device.type == "cuda" else 2048)
    dtype = PRECISIONS[precision]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    products: list[Callable[[], object]] = [lambda: a @ b, lambda: fused_linear(a, b)]  # a bᵀ: the same work
    seconds = math.inf
    with torch.inference_mode(), kernel_plan("onednn"):
        for product in products:
            call_seconds(product, 2, device)
            seconds = min(seconds, *call_seconds(product, iters, device))
    return 2 * n**3 / seconds


# ------------------------------------------------------------------------------------------------
# models
@dataclass
class BenchResult:
    """One model at one batch size: per-call latency (median, p90; ms), throughput (images/s, from
    the median), peak memory (MiB; ``memory_kind`` says how it was measured), FLOPs per call (2 per
    MAC; forward, or forward and backward with ``train``), MFU (achieved FLOP/s over ``peak_flops``),
    and, for a model compared with another, ``ratio``: the median over rounds of its throughput over
    the other's (``ratio_to`` names it)."""

    model: str
    batch: int
    img_size: tuple[int, int]
    device: str
    precision: str
    mode: str
    compiled: bool
    channels_last: bool
    latency_ms: float
    latency_p90_ms: float
    throughput: float
    peak_memory_mb: float
    memory_kind: str
    flops_per_call: int
    peak_flops: float
    mfu: float
    rounds: list[float]
    ratio: float | None = None
    ratio_to: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["img_size"] = list(self.img_size)
        return d


def timm_twin(name: str, img_size: int | None = None) -> nn.Module:
    """timm's model of the same name, randomly initialised (``pretrained=False``), configured for
    ``img_size`` when it takes one (ViT, Swin; timm asserts the size it was built for)."""
    import timm

    if not timm.is_model(name):
        raise ConfigError(f"--vs timm: timm has no model named {name!r} (torchvision names such as vit_b_16 "
                          "have no timm twin under that name; use the timm name, e.g. vit_base_patch16_224)")
    if img_size is not None:
        try:
            return timm.create_model(name, pretrained=False, img_size=img_size)
        except TypeError:  # a CNN: no img_size argument, any size runs
            pass
    return timm.create_model(name, pretrained=False)


MakeOptimizer = Callable[[nn.Module], torch.optim.Optimizer]
"""How a timed training step's optimizer is built from the model it updates."""


def trainer_optimizer(name: str) -> MakeOptimizer:
    """Our trainers' ``name`` optimizer (:func:`~vision_attn.optimizers.build_optimizer`: its fused step
    where it applies), learning rate 1e-4."""
    return lambda model: build_optimizer(name, [{"params": [p for p in model.parameters() if p.requires_grad]}], lr=1e-4)


def torch_optimizer(name: str) -> MakeOptimizer:
    """torch's ``name`` optimizer with PyTorch's defaults (on the CPU, a loop over the parameters),
    learning rate 1e-4."""
    return lambda model: OPTIMIZERS[name](model.parameters(), lr=1e-4)


def timm_optimizer(name: str) -> MakeOptimizer:
    """timm's ``name`` optimizer as timm's training script builds it (``timm.optim.create_optimizer_v2``,
    its defaults), learning rate 1e-4."""
    def make(model: nn.Module) -> torch.optim.Optimizer:
        from timm.optim import create_optimizer_v2

        return create_optimizer_v2(model, opt=name, lr=1e-4)
    return make


def share_weights(model: nn.Module, source: nn.Module) -> bool:
    """Load ``source``'s state dict into ``model`` when their keys and shapes agree (ours and timm's
    ViT and Swin do), so that both compute the same function; returns whether it did."""
    try:
        model.load_state_dict(source.state_dict())
    except RuntimeError:  # another layout: each keeps its own weights
        return False
    return True


def _loss(out: Any) -> torch.Tensor:
    tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return sum(t.float().mean() for t in tensors)  # type: ignore[return-value]


class _Runner:
    """One model ready to run: input on the device, autocast, optional channels-last, compile and an
    optimiser for training steps."""

    def __init__(self, model: nn.Module, batch: int, img_size: tuple[int, int], device: torch.device,
                 precision: str, compile: bool, channels_last: bool, train: bool,
                 make_optimizer: MakeOptimizer | None = None, plan: KernelPlan | None = None) -> None:
        self.device, self.train_mode, self.precision, self.plan = device, train, precision, plan
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        self.model = model.to(device=device, memory_format=fmt).train(train)
        chans = getattr(getattr(model, "patch_embed", None), "in_chans", 3)
        self.x = torch.randn(batch, chans, *img_size, device=device).contiguous(memory_format=fmt)
        runtime = hasattr(model, "reference_model")  # run by another runtime: nothing for torch.compile to do
        self.fn = torch.compile(self.model) if compile and not runtime else self.model
        self.opt = (make_optimizer or trainer_optimizer("sgd"))(self.model) if train else None

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=PRECISIONS[self.precision])

    def step(self, fn: Callable[..., Any] | None = None) -> None:
        with kernel_plan(self.plan) if self.plan is not None else contextlib.nullcontext():
            self._step(fn or self.fn)

    def _step(self, fn: Callable[..., Any]) -> None:
        if self.opt is None:
            with torch.inference_mode(), self._autocast():
                fn(self.x)
            return
        self.opt.zero_grad(set_to_none=True)
        with self._autocast():
            loss = _loss(fn(self.x))
        loss.backward()
        self.opt.step()

    def count_flops(self) -> int:
        """FLOPs of one call, counted on the eager model (fused attention and oneDNN linear included); for a
        model run by another runtime, on the PyTorch module it was exported from (``reference_model``)."""
        with flop_counter() as counter:
            self.step(getattr(self.model, "reference_model", self.model))
        return counter.get_total_flops()

    def peak_memory(self, compiled: bool) -> tuple[float, str]:
        if self.device.type == "cuda":
            return _cuda_peak_mb(self.step), "cuda max_memory_allocated"
        if compiled or hasattr(self.model, "reference_model"):  # memory outside PyTorch's tensors
            return rss_rise_mb(self.step), "resident-set rise"
        return tensor_peak_mb(self.step), "peak tensor memory"


def on_fast_paths(model: nn.Module, *, batch: int, img_size: int | tuple[int, int], device: str | torch.device = "cpu",
                  precision: str = "fp32", train: bool = False, compile: bool = False) -> tuple[nn.Module, KernelPlan | None]:
    """One of our models as it runs in training or the torch-frozen runtime: with the process's measured
    plan judged on this very step on the CPU (:func:`~vision_attn.kernels.judge_plan`; None: the
    process's plan as it is), then accelerated in place for that plan (:func:`~vision_attn.kernels.accelerate`).
    ``compile``: the plain model and no plan, since Dynamo captures PyTorch's standard ops whatever the
    plan (the fast paths step aside in a captured graph)."""
    if compile:
        return model, None
    dtype = PRECISIONS[precision] if precision != "fp32" else None
    judged = (judged_plan(model, example_images(batch, img_size), train=train, autocast=dtype)
              if torch.device(device).type == "cpu" else None)
    return accelerate(model, kernels=needs_kernels(judged or current_plan(), dtype or torch.float32)), judged


def benchmark_models(
    models: dict[str, nn.Module],
    *,
    batch: int = 1,
    img_size: int | tuple[int, int] = 224,
    device: str | torch.device = "cpu",
    precision: str = "fp32",
    compile: bool = False,
    channels_last: bool = False,
    train: bool = False,
    optimizer: str = "sgd",
    rounds: int = 5,
    iters: int = 5,
    warmup: int = 2,
    peak_flops: float | None = None,
    pairs: dict[str, str] | None = None,
    plans: dict[str, KernelPlan] | None = None,
    optimizers: dict[str, MakeOptimizer] | None = None,
    log: Callable[[str], None] | None = None,
) -> list[BenchResult]:
    """Benchmark ``models`` (label -> module) together at one batch size.

    Every model is warmed up (``warmup`` calls, plus compilation with ``compile``), then timed for
    ``rounds`` rounds of ``iters`` calls, the order of the models alternating every round. ``train``
    times a training step (forward, a mean loss, backward, an ``optimizer`` step: a key of
    :data:`vision_attn.optimizers.OPTIMIZERS`, built as our trainers build it, :func:`trainer_optimizer`,
    unless ``optimizers`` gives the label another way) instead of inference; ``precision="bf16"`` runs under bf16 autocast, which is
    what Lightning's ``bf16-mixed`` does.
    ``peak_flops``: the FLOP/s that MFU is relative to (default: :func:`matmul_peak` measured now).
    ``pairs``: label -> label of the model it is compared with; those results get ``ratio``.
    ``plans``: label -> the kernel plan its calls run under (the others: the process's).
    """
    if precision not in PRECISIONS:
        raise ConfigError(f"precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer {optimizer!r}: choose one of {', '.join(OPTIMIZERS)}")
    if batch < 1 or rounds < 1 or iters < 1 or warmup < 0:
        raise ConfigError(f"batch, rounds and iters must be at least 1 (got {batch}, {rounds}, {iters})")
    device = torch.device(device)
    hw = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    peak = peak_flops or matmul_peak(device, precision)
    runners = {k: _Runner(m, batch, hw, device, precision, compile, channels_last, train,
                          (optimizers or {}).get(k, trainer_optimizer(optimizer)), (plans or {}).get(k))
               for k, m in models.items()}
    flops = {k: r.count_flops() for k, r in runners.items()}
    for k, r in runners.items():
        for _ in range(max(warmup, 1)):
            r.step()
        if log:
            log(f"{k}: warmed up")
    memory = {k: r.peak_memory(compile) for k, r in runners.items()}
    times: dict[str, list[float]] = {k: [] for k in runners}
    per_round: dict[str, list[float]] = {k: [] for k in runners}
    names = list(runners)
    for i in range(rounds):
        for k in (names if i % 2 == 0 else names[::-1]):
            t = call_seconds(runners[k].step, iters, device)
            times[k] += t
            per_round[k].append(batch * iters / sum(t))
        if log:
            log(f"round {i}: " + "  ".join(f"{k} {per_round[k][-1]:.2f}/s" for k in names))
    results = []
    for k in names:
        med = statistics.median(times[k])
        res = BenchResult(
            model=k, batch=batch, img_size=hw, device=device.type, precision=precision,
            mode="train" if train else "inference", compiled=compile, channels_last=channels_last,
            latency_ms=1e3 * med, latency_p90_ms=1e3 * percentile(times[k], 90), throughput=batch / med,
            peak_memory_mb=memory[k][0], memory_kind=memory[k][1], flops_per_call=flops[k], peak_flops=peak,
            mfu=flops[k] / med / peak, rounds=per_round[k])
        other = (pairs or {}).get(k)
        if other is not None:
            res.ratio = statistics.median(a / b for a, b in zip(per_round[k], per_round[other]))
            res.ratio_to = other
        results.append(res)
    return results
