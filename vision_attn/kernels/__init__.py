"""The CPU fast paths, in one package: which kernel computes a linear layer or an attention.

The layers and models are plain PyTorch. :func:`accelerate` puts a built model on the fast paths from
outside, in place (state-dict keys unchanged): ``nn.Linear`` becomes :class:`FusedLinear`, attention
calls :func:`sdpa` and :func:`packed_sdpa` (``scaled_dot_product_attention``'s twins), a linear layer
and its GELU run as one kernel (:func:`linear_act`), tables are kept between calls; only this package
asks whether a graph is being captured (:func:`tracing`). :func:`freeze` readies a model for
inference once (accelerated, weights cast, linear weights kept in oneDNN's layout). The kernel plan
(:mod:`~vision_attn.kernels.plan`) decides: ``"measured"`` by default, ``"aten"`` (PyTorch's standard
kernels: the fast paths off), ``"onednn"`` (fixed), or one a run folder recorded. Switch it with
:func:`set_kernel_plan` / :func:`kernel_plan` or ``VISION_ATTN_KERNELS=aten|onednn|measured``.

Inside the package: capture.py (is a graph being captured), timing.py and measure.py (the
self-checks), cache.py (their results on disk), onednn.py and explicit.py (the kernels), plan.py,
linear.py and attention.py (the dispatch), fast_paths.py (the fast paths put on a model: accelerate), judge.py
(a plan judged on a model's whole step), freeze.py (inference), hardware.py (the precisions the CPU
computes natively).
"""
from vision_attn.kernels.fast_paths import accelerate, needs_kernels
from vision_attn.kernels.attention import MAX_EXPLICIT_TOKENS, packed_sdpa, sdpa
from vision_attn.kernels.deformable import deformable_sample
from vision_attn.kernels.freeze import freeze
from vision_attn.kernels.hardware import cpu_has_bf16, runnable_precision
from vision_attn.kernels.judge import example_images, judge_plan, judged_plan
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
    "FusedLinear", "fused_linear", "linear_act", "sdpa", "packed_sdpa", "deformable_sample", "MAX_EXPLICIT_TOKENS",
    "onednn_works", "cpu_has_bf16", "runnable_precision", "accelerate", "needs_kernels", "freeze", "judge_plan", "judged_plan", "example_images",
    "tracing", "capturing_graph", "onnx_exporting", "fx_tracing",
    "KernelPlan", "KernelChoice", "LinearKernels", "PLAN_NAMES", "ENV", "current_plan", "set_kernel_plan",
    "kernel_plan", "resolve_plan", "FLOP_FORMULAS",
]

