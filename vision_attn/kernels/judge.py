"""A plan judged on the step it will run: :func:`judge_plan`.

The self-checks of :mod:`~vision_attn.kernels.measure` time each product and attention in isolation,
where oneDNN can win a large product and still lose the step that runs it (layouts, reorders, the
work between kernels). :func:`judge_plan` times the whole step of one model (forward, and in training
the backward) on an input of the size it will see, under each candidate: the measured choices, PyTorch's
standard kernels, and each family of the measured choices alone (the linear layers' kernels with fused
attention, the attention's kernel with ATen's products). The fastest candidate (its fastest of
alternating rounds, :func:`~vision_attn.kernels.timing.round_seconds`) is the plan, provided it beats
PyTorch's kernels by :data:`MARGIN`: a fast path is applied only where it measures a gain larger than
the rounds' noise. The verdict is kept in the cache file, keyed by the model's architecture, the
input's shape, the step, the dtype and the thread count, when its rounds were steady (each candidate's
median round within :data:`STEADY` of its fastest); a verdict timed while other work disturbed the
rounds is used once and timed again by the next run.
"""
from __future__ import annotations

import copy
import hashlib
from dataclasses import replace
from typing import Any, Callable

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from vision_attn.kernels.cache import cached_measurement, plan_key
from vision_attn.kernels.fast_paths import accelerate, needs_kernels
from vision_attn.kernels.plan import ATEN, LinearKernels, KernelPlan, current_plan, kernel_plan
from vision_attn.kernels.timing import round_seconds

__all__ = ["judge_plan", "judged_plan", "candidates", "example_images", "MARGIN", "STEADY"]

MARGIN = 0.015
"""The share of PyTorch's step time a candidate must save to be chosen over PyTorch's kernels."""

STEADY = 0.05
"""The largest spread (median round over fastest round, less 1) of a verdict kept in the cache."""


def example_images(batch: int, img_size: int | tuple[int, int]) -> torch.Tensor:
    """A seeded batch (batch, 3, H, W) of random images, the input a step is judged on (the process's
    random stream untouched)."""
    hw = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    return torch.randn(batch, 3, *hw, generator=torch.Generator().manual_seed(0))


def candidates(plan: KernelPlan, dtype: torch.dtype) -> dict[str, KernelPlan]:
    """The plans a step is judged between, by name: ``plan`` itself (``"measured"``), ``"aten"``, and
    where they differ, ``"linear only"`` (its products, fused attention) and ``"attention only"``
    (its attention, ATen's products)."""
    choice = plan.choice(dtype)
    with_dtype = lambda c: KernelPlan(plan.name, {**plan.resolved().choices, dtype: c})  # noqa: E731
    found = {"measured": with_dtype(choice), "aten": with_dtype(ATEN),
             "linear only": with_dtype(replace(choice, attention="fused")),
             "attention only": with_dtype(replace(choice, inference="aten", linear=LinearKernels()))}
    unique: dict[str, KernelPlan] = {}
    for name, candidate in found.items():
        if all(candidate.choice(dtype) != other.choice(dtype) for other in unique.values()):
            unique[name] = candidate
    return unique


def _step(model: nn.Module, inputs: torch.Tensor, train: bool, autocast: torch.dtype | None) -> Callable[[], None]:
    def run() -> None:
        with torch.set_grad_enabled(train), torch.autocast("cpu", dtype=autocast or torch.bfloat16,
                                                           enabled=autocast is not None):
            out = model(inputs)
        if train:
            sum(t.float().mean() for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad).backward()
            model.zero_grad(set_to_none=True)
    return run


def _architecture(model: nn.Module) -> str:
    """A short digest of what a step's speed depends on: module types and parameter shapes."""
    text = "".join(f"{name}:{type(m).__name__};" for name, m in model.named_modules())
    text += "".join(f"{name}{tuple(p.shape)};" for name, p in model.named_parameters())
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _verdict(times: dict[str, list[float]]) -> dict[str, Any]:
    """The choice among timed candidates (name -> seconds of each round): the fastest, unless it saves
    less than :data:`MARGIN` of ``"aten"``'s time; ``steady`` when every candidate's median round is
    within :data:`STEADY` of its fastest."""
    seconds = {name: min(t) for name, t in times.items()}
    choice = min(seconds, key=seconds.get)
    if "aten" in seconds and seconds[choice] > (1 - MARGIN) * seconds["aten"]:
        choice = "aten"
    steady = all(sorted(t)[len(t) // 2] <= (1 + STEADY) * min(t) for t in times.values())
    return {"choice": choice, "seconds": seconds, "steady": steady}


def judge_plan(model: nn.Module, inputs: torch.Tensor, *, train: bool, plan: KernelPlan,
               autocast: torch.dtype | None = None, rounds: int = 3) -> tuple[str, KernelPlan, dict[str, Any]]:
    """The candidate of :func:`candidates` under which ``model``'s step on ``inputs`` is fastest:
    (its name, the plan, the seconds of each). ``train``: forward and backward of a mean over the
    outputs (a training step less the optimizer, whose work no plan changes), else a forward without
    gradients; ``autocast``: the dtype of CPU autocast (bf16-mixed training), else the inputs' dtype
    is the plan's. ``model`` is left as it was: the step runs on an accelerated copy, its random
    stream restored. Each candidate runs as :func:`accelerate` puts it on a model
    (:func:`~vision_attn.kernels.fast_paths.needs_kernels`: PyTorch's kernels without the plan's dispatch)."""
    dtype = autocast or inputs.dtype
    options = candidates(plan, dtype)
    if len(options) == 1:
        return "measured", options["measured"], {}
    shape = "x".join(map(str, inputs.shape))
    key = plan_key(f"step v4 {'train' if train else 'inference'} {_architecture(model)} {shape}", dtype,
                   torch.get_num_threads())

    def measure() -> dict[str, Any]:
        steps: dict[bool, Callable[[], None]] = {}  # a copy with the kernels' dispatch, a copy without
        for candidate in options.values():
            kernels = needs_kernels(candidate, dtype)
            if kernels not in steps:
                copy_ = accelerate(copy.deepcopy(model), kernels=kernels)
                steps[kernels] = _step(copy_.train(train), inputs, train, autocast)

        def under(candidate: KernelPlan) -> Callable[[], None]:
            step = steps[needs_kernels(candidate, dtype)]

            def run() -> None:
                with kernel_plan(candidate):
                    step()
            return run
        with torch.random.fork_rng():
            for candidate in options.values():  # warm-up: first calls pack weights, fill caches
                under(candidate)()
            times = round_seconds({name: under(c) for name, c in options.items()}, rounds)
        return _verdict(times)

    verdict = cached_measurement(key, measure, lambda e: isinstance(e, dict) and e.get("choice") in options,
                                 keep=lambda e: e["steady"])
    return verdict["choice"], options[verdict["choice"]], verdict.get("seconds", {})


def judged_plan(model: nn.Module, inputs: torch.Tensor, *, train: bool,
                autocast: torch.dtype | None = None) -> KernelPlan | None:
    """The process's plan judged on ``model``'s step (:func:`judge_plan`) where it is the measured plan
    and ``inputs`` are on the CPU; None where the process's plan holds as it is (a fixed plan, a GPU)."""
    plan = current_plan()
    if plan.name != "measured" or inputs.device.type != "cpu":
        return None
    return judge_plan(model, inputs, train=train, plan=plan.resolved(), autocast=autocast)[1]
