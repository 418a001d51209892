"""The CPU fast paths, in one package: which kernel computes a linear layer or an attention.

Layers use :class:`FusedLinear` (an ``nn.Linear``), :func:`fused_linear` (``F.linear``'s twin),
:func:`linear_act` (a linear layer and its GELU in one kernel), :func:`sdpa` and
:func:`packed_sdpa` (``scaled_dot_product_attention``'s twins), and ask :func:`tracing` whether a
graph is being captured; nothing outside this package knows which kernel runs. :func:`freeze`
readies a model for inference once (weights cast, linear weights kept in oneDNN's layout). The kernel plan
(:mod:`~vision_attn.kernels.plan`) decides: ``"measured"`` by default, ``"aten"`` (PyTorch's standard
kernels: the fast paths off), ``"onednn"`` (fixed), or one a run folder recorded. Switch it with
:func:`set_kernel_plan` / :func:`kernel_plan` or ``VISION_ATTN_KERNELS=aten|onednn|measured``.

Inside the package: capture.py (is a graph being captured), timing.py and measure.py (the
self-checks), cache.py (their results on disk), onednn.py and explicit.py (the kernels), plan.py,
linear.py and attention.py (the dispatch), freeze.py (inference).
"""
from vision_attn.kernels.attention import MAX_EXPLICIT_TOKENS, packed_sdpa, sdpa
from vision_attn.kernels.freeze import freeze
from vision_attn.kernels.capture import capturing_graph, fx_tracing, onnx_exporting, tracing
from vision_attn.kernels.linear import FusedLinear, fused_linear, linear_act
from vision_attn.kernels.onednn import FLOP_FORMULAS, onednn_works
from vision_attn.kernels.plan import (
    ENV,
    PLAN_NAMES,
    KernelChoice,
    KernelPlan,
    LinearKernels,
    current_plan,
    kernel_plan,
    resolve_plan,
    set_kernel_plan,
)

__all__ = [
    "FusedLinear", "fused_linear", "linear_act", "sdpa", "packed_sdpa", "MAX_EXPLICIT_TOKENS",
    "onednn_works", "freeze",
    "tracing", "capturing_graph", "onnx_exporting", "fx_tracing",
    "KernelPlan", "KernelChoice", "LinearKernels", "PLAN_NAMES", "ENV", "current_plan", "set_kernel_plan",
    "kernel_plan", "resolve_plan", "FLOP_FORMULAS",
]

