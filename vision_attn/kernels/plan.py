"""The kernel plan: which kernel computes each product and each attention, per dtype.

A plan names, for float32 and bfloat16, the kernel of a linear layer at inference (``"onednn"``:
oneDNN's primitive with bias and GELU fused; ``"aten"``: ``F.linear``), of each product of its
training step (forward, input gradient, weight gradient; a product chosen ``"onednn"`` runs there
from ``onednn_from`` multiply-adds on, through ATen below), and of attention (``"explicit"``: the
weights written out, :mod:`~vision_attn.kernels.explicit`; ``"fused"``: ``scaled_dot_product_attention``).
The kernels round differently, so the plan is part of what makes a run reproducible.

Plans by name: ``"aten"`` (PyTorch's standard kernels everywhere: what the fast paths being off
means), ``"onednn"`` (a fixed plan: oneDNN for every product at every size, explicit attention in
bf16, fused in fp32) and ``"measured"`` (the default: each choice timed once per machine, dtype and
thread count by the self-checks of :mod:`~vision_attn.kernels.measure`, then read from the cache).
A plan whose kernel cannot run here (oneDNN on another CPU, or bf16 on a CPU without bf16
instructions) runs ATen for it instead. The process's plan comes from ``VISION_ATTN_KERNELS``
(a name; default ``measured``) until :func:`set_kernel_plan` or :func:`kernel_plan` changes it.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Mapping

import torch

from vision_attn.errors import ConfigError
from vision_attn.kernels.cache import cached_measurement, plan_key
from vision_attn.kernels.measure import measure_attention, measure_linear
from vision_attn.kernels.onednn import PRODUCTS, onednn_works
from vision_attn.kernels.timing import self_check_clock

__all__ = ["LinearKernels", "KernelChoice", "KernelPlan", "PLAN_NAMES", "ENV", "current_plan", "set_kernel_plan",
           "kernel_plan", "resolve_plan"]

ENV = "VISION_ATTN_KERNELS"
PLAN_NAMES = ("measured", "aten", "onednn")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
ATTENTION_KERNELS = ("fused", "explicit")
LINEAR_KERNELS = ("aten", "onednn")


@dataclass(frozen=True)
class LinearKernels:
    """The kernel of each product of a linear layer's training step; a product chosen ``"onednn"``
    runs through oneDNN from ``onednn_from[product]`` multiply-adds (M*K*N) on (missing: every size)."""

    forward: str = "aten"
    input_grad: str = "aten"
    weight_grad: str = "aten"
    onednn_from: Mapping[str, int] = field(default_factory=dict)

    def uses_onednn(self, product: str, macs: int) -> bool:
        """Whether a product of ``macs`` multiply-adds runs through oneDNN."""
        return getattr(self, product) == "onednn" and macs >= self.onednn_from.get(product, 0)

    def kernel(self, product: str, macs: int):
        return PRODUCTS[product]["onednn" if self.uses_onednn(product, macs) else "aten"]

    def any_onednn(self, macs: int) -> bool:
        """Whether any of a layer's three products of ``macs`` multiply-adds runs through oneDNN."""
        return any(self.uses_onednn(product, macs) for product in PRODUCTS)


@dataclass(frozen=True)
class KernelChoice:
    """The kernels of one dtype: ``inference`` (``"onednn"`` or ``"aten"``), ``linear`` (the training
    products) and ``attention`` (``"explicit"`` or ``"fused"``). ``seconds``: what the self-checks
    measured, where they chose (kernel -> seconds per call in its fastest round, by what was timed)."""

    inference: str = "aten"
    linear: LinearKernels = field(default_factory=LinearKernels)
    attention: str = "fused"
    seconds: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def as_dict(self) -> dict[str, Any]:
        lin = self.linear
        return {"inference": self.inference, "forward": lin.forward, "input_grad": lin.input_grad,
                "weight_grad": lin.weight_grad, "onednn_from": dict(lin.onednn_from), "attention": self.attention,
                **({"seconds": dict(self.seconds)} if self.seconds else {})}

    @classmethod
    def from_dict(cls, entry: Any) -> KernelChoice:
        """The choice an :meth:`as_dict` entry describes; ValueError naming what is wrong."""
        if not isinstance(entry, Mapping):
            raise ValueError(f"expected a mapping of kernels, got {type(entry).__name__}")
        for key, allowed in (("inference", LINEAR_KERNELS), *((p, LINEAR_KERNELS) for p in PRODUCTS),
                             ("attention", ATTENTION_KERNELS)):
            if entry.get(key) not in allowed:
                raise ValueError(f"{key}: {entry.get(key)!r} is not one of {', '.join(allowed)}")
        crossing = entry.get("onednn_from", {})
        if not (isinstance(crossing, Mapping) and all(p in PRODUCTS and type(n) is int and n >= 0
                                                      for p, n in crossing.items())):
            raise ValueError(f"onednn_from: {crossing!r} is not a mapping of products to sizes >= 0")
        seconds = entry.get("seconds", {})
        return cls(entry["inference"], LinearKernels(*(entry[p] for p in PRODUCTS), dict(crossing)),
                   entry["attention"], dict(seconds) if isinstance(seconds, Mapping) else {})

    def runnable(self, dtype: torch.dtype) -> KernelChoice:
        """This choice with ATen in place of oneDNN where oneDNN cannot run ``dtype`` on this machine."""
        if onednn_works(dtype):
            return self
        return replace(self, inference="aten", linear=LinearKernels())


ATEN = KernelChoice()
FIXED: dict[str, dict[torch.dtype, KernelChoice]] = {
    "aten": {torch.float32: ATEN, torch.bfloat16: ATEN},
    "onednn": {dtype: KernelChoice("onednn", LinearKernels("onednn", "onednn", "onednn"),
                                   "explicit" if dtype == torch.bfloat16 else "fused")
               for dtype in DTYPES.values()},
}


def _measure(dtype: torch.dtype, threads: int) -> KernelChoice:
    """This machine's choice for ``dtype`` at ``threads`` threads: each family timed once, then cached."""
    clock = self_check_clock(threads)
    works = onednn_works(dtype)
    linear = (cached_measurement(plan_key("linear", dtype, threads), lambda: measure_linear(dtype, clock=clock),
                                 _valid_linear) if works else {p: "aten" for p in PRODUCTS})
    attention = cached_measurement(plan_key("attention", dtype, threads), lambda: measure_attention(dtype, clock=clock),
                                   lambda e: isinstance(e, dict) and e.get("kernel") in ATTENTION_KERNELS)
    return KernelChoice.from_dict({
        **linear, "inference": "onednn" if works else "aten", "attention": attention["kernel"],
        "seconds": {"linear": linear.get("seconds", {}), "attention": attention.get("seconds", {})}})


def _valid_linear(entry: Any) -> bool:
    """A stored linear measurement is complete (a damaged entry, or a product chosen for oneDNN
    without its crossover, is measured again)."""
    try:
        lin = KernelChoice.from_dict({**entry, "inference": "aten", "attention": "fused"}).linear
    except (ValueError, TypeError, KeyError):
        return False
    return all(p in lin.onednn_from for p in PRODUCTS if getattr(lin, p) == "onednn")


@dataclass(frozen=True)
class KernelPlan:
    """A named plan; ``choices`` fixes the kernels per dtype (a recorded or fixed plan), and a
    ``"measured"`` plan without them measures each dtype on first use (:meth:`choice`)."""

    name: str
    choices: Mapping[torch.dtype, KernelChoice] = field(default_factory=dict)
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def choice(self, dtype: torch.dtype) -> KernelChoice:
        """The kernels for ``dtype`` (other dtypes than float32 and bfloat16: ATen's)."""
        measured = self.name == "measured" and dtype not in self.choices
        key = (dtype, torch.get_num_threads() if measured else 0)
        got = self._memo.get(key)
        if got is None:
            if dtype in self.choices:
                got = self.choices[dtype].runnable(dtype)
            elif measured and dtype in DTYPES.values():
                got = _measure(dtype, key[1])
            else:  # another dtype, or a fixed plan without this one: PyTorch's kernels
                got = ATEN
            self._memo[key] = got
        return got

    @property
    def fast_paths(self) -> bool:
        """Whether any kernel besides PyTorch's standard ones may run."""
        return self.name != "aten"

    def resolved(self) -> KernelPlan:
        """The plan with a choice for every dtype (a measured plan measures what it has not yet)."""
        return KernelPlan(self.name, {dtype: self.choice(dtype) for dtype in DTYPES.values()})

    def as_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data, every dtype resolved (what a run folder records)."""
        return {"plan": self.name, **{name: self.choice(dtype).as_dict() for name, dtype in DTYPES.items()}}

    @classmethod
    def from_dict(cls, data: Any) -> KernelPlan:
        """The plan :meth:`as_dict` wrote; ValueError naming what is wrong."""
        if not isinstance(data, Mapping) or data.get("plan") not in PLAN_NAMES:
            raise ValueError(f"'plan' must be one of {', '.join(PLAN_NAMES)}")
        choices = {}
        for name, dtype in DTYPES.items():
            try:
                choices[dtype] = KernelChoice.from_dict(data.get(name))
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{name}: {e}") from None
        return cls(data["plan"], choices)


def resolve_plan(plan: KernelPlan | str | Mapping[str, Any]) -> KernelPlan:
    """A plan from a name in :data:`PLAN_NAMES`, a recorded dict, or a plan."""
    if isinstance(plan, KernelPlan):
        return plan
    if isinstance(plan, Mapping):
        return KernelPlan.from_dict(plan)
    if plan == "measured":
        return KernelPlan("measured")
    if plan in FIXED:
        return KernelPlan(plan, FIXED[plan])
    raise ConfigError(f"kernel plan {plan!r}: choose one of {', '.join(PLAN_NAMES)}")


_current: KernelPlan | None = None


def current_plan() -> KernelPlan:
    """The process's plan: the last one set, else the one ``VISION_ATTN_KERNELS`` names (default ``measured``)."""
    global _current
    if _current is None:
        name = os.environ.get(ENV, "measured")
        if name not in PLAN_NAMES:
            raise ConfigError(f"{ENV}={name!r}: choose one of {', '.join(PLAN_NAMES)}")
        _current = resolve_plan(name)
    return _current


def set_kernel_plan(plan: KernelPlan | str | Mapping[str, Any]) -> KernelPlan:
    """Make ``plan`` (a name, a recorded dict or a plan) the process's plan; returns the previous one,
    so that a caller can restore it. ``set_kernel_plan("aten")`` turns every CPU fast path off."""
    global _current
    previous, _current = current_plan(), resolve_plan(plan)
    return previous


@contextlib.contextmanager
def kernel_plan(plan: KernelPlan | str | Mapping[str, Any]) -> Iterator[KernelPlan]:
    """Run the block under ``plan``; the previous plan is restored afterwards."""
    previous = set_kernel_plan(plan)
    try:
        yield current_plan()
    finally:
        set_kernel_plan(previous)
