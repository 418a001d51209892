"""Linear layers on the CPU through oneDNN, with the bias and GELU fused, for inference and training.

On the CPU, ``nn.Linear`` calls MKL's GEMM (``addmm``): the bias is first copied into the output and
the activation is a second pass over it. Measured on this project's machine (AMD EPYC, 2 threads,
fp32, 2048^3): MKL 200 GFLOP/s, oneDNN's matmul primitive 430 GFLOP/s, with the same fp32 accuracy
(on a later host of the same kind 146 and 207: the lead depends on the CPU, docs/benchmarks.md).
:func:`linear` calls that primitive (``torch.ops.mkldnn._linear_pointwise``, the op torch.compile's
CPU backend emits for the same pattern) with the bias and an exact or tanh GELU fused, which makes a
ViT forward pass 1.3x-1.9x faster here, depending on the host (docs/benchmarks.md).

Training: when autograd records a graph, :class:`_Linear` (a ``torch.autograd.Function``) runs the
three products of a linear layer (forward ``x W^T + b``, input gradient ``g W``, weight gradient
``g^T x``) each through oneDNN or through ATen's kernel (MKL's GEMM), whichever :func:`training_kernels`
measured to be faster on this machine, once per dtype and thread count; the choice is kept in the
user's cache folder, so that later runs make the same one (a run is then deterministic). oneDNN costs
more per call than ATen (about 13 against a few microseconds here), so a product chosen for oneDNN
runs there only from the size where the two kernels' measured times cross (fitted from a large and a
small product); a layer whose three products are all below it trains through the standard ops. The forward keeps the
pre-activation for GELU's backward, so there the GELU is a separate pass (as in ``nn.Linear`` +
``nn.GELU``); the bias is fused. What it gains depends on the machine and its load (docs/benchmarks.md,
"Training step on the CPU"). Second derivatives (``create_graph=True``) are computed through the
standard differentiable ops.

bf16: bf16 weights and inputs take the same kernels, and so does bf16 autocast on the CPU (Lightning's
``precision="bf16-mixed"``): the input, weight and bias are cast to bfloat16 as autocast would cast
them for ``F.linear``, and the fused kernel runs on them.

The fast path is taken only where it is exactly a drop-in: CPU tensors in float32 or bfloat16 (or
bf16 autocast), outside tracing, ONNX export, torch.compile (which fuse by themselves) and torch.func
transforms or forward-mode AD. A layer whose ``weight`` is not a tensor (PyTorch's dynamically
quantized ``Linear``, where it is a method) is called as it is. Everywhere else, and when the op is
missing or fails a one-off self-check, it is ``F.linear``. ``VISION_ATTN_ONEDNN=0`` or
:func:`set_onednn_linear` turns inference and training paths off.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.autograd.forward_ad as forward_ad
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

from vision_attn.errors import VisionAttnError
from vision_attn.io.cache import cache_dir
from vision_attn.io.atomic import write_json
from vision_attn.io.json import read_json

_enabled = os.environ.get("VISION_ATTN_ONEDNN", "1") != "0"
_DTYPES = (torch.float32, torch.bfloat16)


def fast_paths_enabled() -> bool:
    """Whether the CPU fast paths (these linear kernels, and the explicit attention of
    :mod:`vision_attn.layers.softmax_attention`) are on: ``VISION_ATTN_ONEDNN`` and :func:`set_onednn_linear`."""
    return _enabled


def set_onednn_linear(enabled: bool) -> bool:
    """Turn the oneDNN paths of :func:`linear` (inference and training), and with them the explicit
    attention on the CPU, on or off for the process; returns the previous setting, so a caller can
    restore it."""
    global _enabled
    previous, _enabled = _enabled, enabled
    return previous


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, attr: str = "none",
            algorithm: str = "") -> torch.Tensor:
    """oneDNN's matmul: ``attr(x @ weight.T + bias)`` over the last dimension of ``x``."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, [], algorithm)


@contextlib.contextmanager
def self_check_context() -> Any:
    """Where the self-checks run: no autograd, no autocast, no active dispatch mode (whatever context
    the first call that triggers them is in, they measure the kernels themselves)."""
    with torch.no_grad(), torch.autocast("cpu", enabled=False), _disable_current_modes():
        yield


@functools.cache
def _onednn_works() -> bool:
    """The op exists on this build and machine (x86-64, where it was measured) and agrees with F.linear."""
    if platform.machine().lower() not in ("x86_64", "amd64") or not torch.backends.mkldnn.is_available():
        return False
    try:
        # outside any active dispatch mode (a FLOP counter, say) and autocast (the first call may be
        # under bf16 autocast, which would compare a bf16 F.linear with fp32): the check is not the user's work
        with self_check_context():
            gen = torch.Generator().manual_seed(0)  # not the global stream: a training run's draws stay as they were
            x, w, b = (torch.randn(*s, generator=gen) for s in ((3, 5, 8), (4, 8), (4,)))
            return torch.allclose(_onednn(x, w, b, "gelu", "none"), F.gelu(F.linear(x, w, b)), atol=1e-5)
    except (AttributeError, RuntimeError):
        return False


def onednn_linear_available() -> bool:
    """oneDNN's fused linear kernel is usable on this build and machine (whether or not it is turned on)."""
    return _onednn_works()


# ------------------------------------------------------------------------------------------------
# the three products of a training step, each with two kernels; 2-D operands: x (M, K), weight (N, K),
# output gradient g (M, N)
KERNELS: dict[str, dict[str, Callable[..., torch.Tensor]]] = {
    "forward": {  # (x, weight, bias) -> x W^T + b
        "aten": F.linear,
        "onednn": _onednn,
    },
    "input_grad": {  # (g, weight) -> g W
        "aten": lambda g, w: g.mm(w),
        "onednn": lambda g, w: _onednn(g, w.t(), None),
    },
    "weight_grad": {  # (g, x) -> g^T x
        "aten": lambda g, x: g.t().mm(x),
        "onednn": lambda g, x: _onednn(g.t(), x.t(), None),
    },
}
"""product -> kernel name -> function. ``aten`` is what ``F.linear`` and its backward run (MKL's GEMM
on the CPU)."""

CHECK_SHAPE = (256, 384, 1536)
"""(M, K, N) of the products that :func:`training_kernels` times: ViT-S's MLP at 256 tokens."""

SMALL_SHAPE = (16, 128, 384)
"""(M, K, N) of the small products it also times (a width-128 layer at 16 tokens): with
:data:`CHECK_SHAPE`, the two sizes from which each kernel's fixed cost per call and cost per
multiply-add are fitted, and so the size below which oneDNN's larger fixed cost loses."""

SMALL_REPEAT = 20
"""Calls per timing at :data:`SMALL_SHAPE` (one call there takes tens of microseconds)."""


@dataclass(frozen=True)
class KernelPlan:
    """The kernel (``"onednn"`` or ``"aten"``) that computes each product of a training step, as
    chosen by :func:`training_kernels`.

    ``forward``, ``input_grad``, ``weight_grad``: the choice at :data:`CHECK_SHAPE`; a product chosen
    ``"onednn"`` runs through oneDNN only from ``onednn_from[product]`` multiply-adds (M*K*N) on
    (missing: every size), through ATen below. ``seconds`` and ``small_seconds``: product -> kernel ->
    median seconds per call measured at :data:`CHECK_SHAPE` and :data:`SMALL_SHAPE`.
    """

    forward: str
    input_grad: str
    weight_grad: str
    seconds: dict[str, dict[str, float]]
    small_seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    onednn_from: dict[str, int] = field(default_factory=dict)

    def uses_onednn(self, product: str, macs: int) -> bool:
        """Whether a product of ``macs`` multiply-adds runs through oneDNN."""
        return getattr(self, product) == "onednn" and macs >= self.onednn_from.get(product, 0)

    def kernel(self, product: str, macs: int) -> Callable[..., torch.Tensor]:
        return KERNELS[product]["onednn" if self.uses_onednn(product, macs) else "aten"]

    def any_onednn(self, macs: int) -> bool:
        """Whether any of a layer's three products of ``macs`` multiply-adds each runs through oneDNN."""
        return any(self.uses_onednn(product, macs) for product in KERNELS)


def _agrees(out: torch.Tensor, ref: torch.Tensor) -> bool:
    tol = 1e-5 if out.dtype == torch.float32 else 1e-2
    return out.shape == ref.shape and bool((out.float() - ref.float()).abs().max() <= tol * ref.float().abs().max())


def median_seconds(calls: dict[str, Callable[[], object]], rounds: int,
                   clock: Callable[[], float] = time.perf_counter, repeat: int = 1) -> dict[str, float]:
    """name -> median seconds of one ``calls[name]()`` (timed ``repeat`` calls at a time) over
    ``rounds`` rounds, the order of the calls reversed every other round (what the self-checks time
    their candidates with)."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(rounds):
        for name in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
            start = clock()
            for _ in range(repeat):
                calls[name]()
            times[name].append((clock() - start) / repeat)
    return {name: statistics.median(t) for name, t in times.items()}


def crossover(small: dict[str, float], large: dict[str, float], small_macs: int, large_macs: int) -> int:
    """The multiply-adds from which oneDNN is faster, for a product whose oneDNN kernel won at
    ``large_macs``: each kernel's time fitted as a fixed cost plus a cost per multiply-add through its
    times (seconds) at the two sizes, and the lines intersected; 0 where oneDNN also won the small size."""
    lead_small = small["aten"] - small["onednn"]  # oneDNN's lead, linear in the size
    lead_large = large["aten"] - large["onednn"]
    if not lead_large > 0:
        raise ValueError(f"oneDNN did not win at {large_macs} multiply-adds: there is no size from which it is faster")
    if lead_small > 0:
        return 0
    return math.ceil(small_macs + -lead_small * (large_macs - small_macs) / (lead_large - lead_small))


def product_operands(dtype: torch.dtype, shape: tuple[int, int, int]) -> dict[str, tuple[torch.Tensor, ...]]:
    """Random operands of each product for ``shape`` (M, K, N)."""
    M, K, N = shape
    gen = torch.Generator().manual_seed(0)  # not the global stream: a training run's draws stay as they were
    x, w, g = (torch.randn(*s, generator=gen).to(dtype) for s in ((M, K), (N, K), (M, N)))
    b = torch.randn(N, generator=gen).to(dtype)
    return {"forward": (x, w, b), "input_grad": (g, w), "weight_grad": (g, x)}


def measure_kernels(dtype: torch.dtype = torch.float32, shape: tuple[int, int, int] = CHECK_SHAPE,
                    rounds: int = 5, clock: Callable[[], float] = time.perf_counter,
                    small_shape: tuple[int, int, int] = SMALL_SHAPE) -> KernelPlan:
    """Time each product's two kernels on random ``shape`` operands in ``dtype``, alternating their
    order every round, and choose the faster by the median; a oneDNN result that does not agree with
    ATen's (relative to the largest entry: 1e-5 in fp32, 1e-2 in bf16) is never chosen. Where oneDNN
    is chosen, both are timed again at ``small_shape`` and the size from which oneDNN is faster is
    fitted (:func:`crossover`)."""
    operands, small_operands = product_operands(dtype, shape), product_operands(dtype, small_shape)
    choice, seconds, small_seconds, onednn_from = {}, {}, {}, {}
    with self_check_context():
        for product, args in operands.items():
            kernels = KERNELS[product]
            if not _agrees(kernels["onednn"](*args), kernels["aten"](*args)):
                choice[product], seconds[product] = "aten", {}
                continue
            seconds[product] = median_seconds({k: functools.partial(fn, *args) for k, fn in kernels.items()},
                                              rounds, clock)
            choice[product] = min(seconds[product], key=seconds[product].__getitem__)
            if choice[product] == "onednn":
                small = small_operands[product]
                small_seconds[product] = median_seconds({k: functools.partial(fn, *small) for k, fn in kernels.items()},
                                                        rounds, clock, SMALL_REPEAT)
                onednn_from[product] = crossover(small_seconds[product], seconds[product],
                                                 math.prod(small_shape), math.prod(shape))
    return KernelPlan(**choice, seconds=seconds, small_seconds=small_seconds, onednn_from=onednn_from)


PLANS_FILE = "linear_kernels.json"
"""The measured choices, in :func:`~vision_attn.io.cache.cache_dir`: one entry per torch version, CPU,
thread count and dtype."""


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def plan_key(dtype: torch.dtype, threads: int) -> str:
    """What a measured choice depends on: torch version, CPU, thread count and dtype."""
    return f"torch {torch.__version__}; {_cpu_name()}; {threads} threads; {str(dtype).removeprefix('torch.')}"


def _read_plans(path: Path) -> dict[str, Any]:
    """The stored choices; an unreadable, damaged or oversized file counts as none (measured again)."""
    try:
        plans = read_json(path, what="kernel choices", max_bytes=1 << 20)
    except (VisionAttnError, OSError):
        return {}
    return plans if isinstance(plans, dict) else {}


def _stored_plan(entry: Any) -> KernelPlan | None:
    try:
        plan = KernelPlan(entry["forward"], entry["input_grad"], entry["weight_grad"], dict(entry["seconds"]),
                          dict(entry["small_seconds"]), entry["onednn_from"])
    except (KeyError, TypeError, ValueError):  # also an entry from before the crossover was measured
        return None
    chosen = [getattr(plan, p) for p in KERNELS]
    if not (all(isinstance(k, str) and k in KERNELS[p] for p, k in zip(KERNELS, chosen))
            and isinstance(plan.onednn_from, dict)
            and all(p in KERNELS and type(n) is int and n >= 0 for p, n in plan.onednn_from.items())
            and all(p in plan.onednn_from for p, k in zip(KERNELS, chosen) if k == "onednn")):
        return None  # measured again
    return plan


def cached_measurement(key: str, measure: Callable[[], dict[str, Any]], valid: Callable[[Any], bool]) -> dict[str, Any]:
    """The entry stored under ``key`` in :data:`PLANS_FILE` if ``valid`` accepts it; else ``measure()``,
    added to the file (written atomically; a cache that cannot be written is skipped)."""
    path = cache_dir() / PLANS_FILE
    entry = _read_plans(path).get(key)
    if valid(entry):
        return entry
    entry = measure()
    try:
        write_json(path, {**_read_plans(path), key: entry}, mkdir=True)
    except OSError:
        pass
    return entry


def self_check_clock(threads: int) -> Callable[[], float]:
    """The clock a self-check times with: CPU time of the thread with one thread (immune to preemption)."""
    return time.thread_time if threads == 1 else time.perf_counter


@functools.cache
def _plan(dtype: torch.dtype, threads: int) -> KernelPlan:
    entry = cached_measurement(plan_key(dtype, threads),
                               lambda: asdict(measure_kernels(dtype, clock=self_check_clock(threads))),
                               lambda e: _stored_plan(e) is not None)
    return _stored_plan(entry)


def training_kernels(dtype: torch.dtype = torch.float32) -> KernelPlan:
    """The kernels the training path uses for ``dtype`` at the current thread count: measured once
    per machine (:func:`measure_kernels`, about 0.1-0.3 s), then read from the cache file
    :data:`PLANS_FILE`, so that every later run makes the same choice and training stays
    deterministic; delete the file to measure again."""
    return _plan(dtype, torch.get_num_threads())


class _Linear(torch.autograd.Function):
    """``act(x W^T + b)`` with act GELU (``approximate`` "none" or "tanh") or none, each product
    (``macs`` multiply-adds, M*K*N) through the kernel ``plan`` names for its size."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                approximate: str | None, plan: KernelPlan, macs: int) -> torch.Tensor:
        h = plan.kernel("forward", macs)(x, weight, bias)
        ctx.save_for_backward(x, weight, bias, h if approximate is not None else None)
        ctx.approximate, ctx.plan, ctx.macs = approximate, plan, macs
        return h if approximate is None else F.gelu(h, approximate=approximate)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, bias, h = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        if torch.is_grad_enabled():  # create_graph: the standard ops, which autograd can differentiate again
            inputs = [t for t, need in ((x, need_x), (weight, need_w), (bias, need_b)) if need]
            y = F.linear(x, weight, bias)
            y = y if ctx.approximate is None else F.gelu(y, approximate=ctx.approximate)
            grads = iter(torch.autograd.grad(y, inputs, grad, create_graph=True))
            return (next(grads) if need_x else None, next(grads) if need_w else None,
                    next(grads) if need_b else None, None, None, None)
        if h is not None:
            grad = torch.ops.aten.gelu_backward(grad, h, approximate=ctx.approximate)
        g = grad.reshape(-1, grad.shape[-1])
        dx = ctx.plan.kernel("input_grad", ctx.macs)(g, weight).view(x.shape) if need_x else None
        dw = ctx.plan.kernel("weight_grad", ctx.macs)(g, x.reshape(-1, x.shape[-1])) if need_w else None
        db = g.sum(0) if need_b else None
        return dx, dw, db, None, None, None


# ------------------------------------------------------------------------------------------------
def capturing_graph() -> bool:
    """Inside TorchScript tracing, ONNX export, torch.compile or torch.export (which compiles): the
    graph must hold the standard ops, so the CPU fast paths stay off."""
    return torch.jit.is_tracing() or torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling()


def autograd_transforms_active() -> bool:
    """torch.func transforms or forward-mode AD: a custom ``autograd.Function`` defines neither."""
    return torch._C._are_functorch_transforms_active() or forward_ad._current_level >= 0


def _mode(x: torch.Tensor, weight: torch.Tensor) -> str | None:
    """``"inference"``, ``"training"`` (autograd records a graph through the layer), or ``None``
    where the standard ``F.linear`` must run."""
    if not (_enabled and not isinstance(x, torch.fx.Proxy)  # torch.fx symbolic tracing: keep the standard graph
            and x.device.type == "cpu" and weight.device.type == "cpu"):
        return None
    if torch.is_autocast_enabled("cpu"):
        if torch.get_autocast_dtype("cpu") != torch.bfloat16 or x.dtype not in _DTYPES or weight.dtype not in _DTYPES:
            return None
    elif x.dtype not in _DTYPES or weight.dtype != x.dtype:
        return None
    if capturing_graph():
        return None
    if not _onednn_works():
        return None
    if not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)):
        return "inference"
    if autograd_transforms_active():
        return None  # torch.func transforms and forward-mode AD: the Function defines neither
    return "training"


def linear(x: torch.Tensor, layer: nn.Linear, act: nn.Module | None = None) -> torch.Tensor:
    """``act(layer(x))`` over the last dimension; on the CPU one fused oneDNN call at inference, and
    the kernels of :func:`training_kernels` in training, when ``act`` is ``None`` or ``nn.GELU`` (any
    other activation runs after the linear layer)."""
    if not isinstance(layer.weight, (torch.Tensor, torch.fx.Proxy)):  # a swapped-in module, e.g. a dynamically quantized Linear
        y = layer(x)
        return y if act is None else act(y)
    mode, plan = _mode(x, layer.weight), None
    if mode == "training":  # the products of a small layer all below oneDNN's crossover: the standard ops
        plan = training_kernels(torch.bfloat16 if torch.is_autocast_enabled("cpu") else x.dtype)
        macs = x.numel() * layer.weight.shape[0]  # M*K*N of each of the three products
        mode = mode if plan.any_onednn(macs) else None
    if mode is None:
        y = F.linear(x, layer.weight, layer.bias)
        return y if act is None else act(y)
    gelu = isinstance(act, nn.GELU)
    weight, bias, autocast = layer.weight, layer.bias, contextlib.nullcontext()
    if torch.is_autocast_enabled("cpu"):  # cast as autocast casts F.linear's arguments, then run without it
        x, weight = x.to(torch.bfloat16), weight.to(torch.bfloat16)
        bias = bias.to(torch.bfloat16) if bias is not None else None
        autocast = torch.autocast("cpu", enabled=False)
    with autocast:
        if mode == "inference":
            y = _onednn(x, weight, bias, "gelu" if gelu else "none", act.approximate if gelu else "")
        else:
            y = _Linear.apply(x, weight, bias, act.approximate if gelu else None, plan, macs)
    return y if act is None or gelu else act(y)
