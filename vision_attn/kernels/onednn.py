"""oneDNN's matmul primitive on the CPU, with the bias and an exact or tanh GELU fused.

On the CPU ``nn.Linear`` calls MKL's GEMM (``addmm``): the bias is first copied into the output and
the activation is a second pass over it. ``torch.ops.mkldnn._linear_pointwise`` (the op that
torch.compile's CPU backend emits for the same pattern) is oneDNN's primitive with both fused; how
much faster it runs depends on the CPU (docs/benchmarks.md, "CPU kernels"). It is used only where a
one-off self-check found it working and agreeing with ``F.linear`` for the dtype: x86-64 builds
with oneDNN, in float32, and in bfloat16 where the CPU has the instructions for it.
"""
from __future__ import annotations

import functools
import platform
from typing import Callable

import torch
import torch.nn.functional as F

from vision_attn.kernels.timing import self_check_context

__all__ = ["onednn_linear", "onednn_pack", "onednn_works", "PRODUCTS", "agrees", "FLOP_FORMULAS"]

DTYPES = (torch.float32, torch.bfloat16)


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, attr: str = "none",
                  algorithm: str = "") -> torch.Tensor:
    """oneDNN's matmul: ``attr(x @ weight.T + bias)`` over the last dimension of ``x`` (attr
    ``"none"`` or ``"gelu"`` with algorithm ``"none"`` or ``"tanh"``)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, [], algorithm)


def onednn_pack(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` (N, K) reordered once into oneDNN's blocked layout for :func:`onednn_linear` (an opaque
    ``torch._mkldnn`` tensor; any number of rows M): what torch.compile's freezing does to a linear
    layer's weight, so that the matmul primitive does not reorder it in every call."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, None)


def agrees(out: torch.Tensor, ref: torch.Tensor, fp32_tol: float = 1e-5, bf16_tol: float = 1e-2) -> bool:
    """``out`` equals ``ref`` within the dtype's tolerance relative to ``ref``'s largest entry."""
    tol = fp32_tol if out.dtype == torch.float32 else bf16_tol
    return out.shape == ref.shape and bool((out.float() - ref.float()).abs().max() <= tol * ref.float().abs().max())


@functools.cache
def onednn_works(dtype: torch.dtype) -> bool:
    """The op exists on this build and machine (x86-64, where it was measured), runs in ``dtype`` and
    agrees with F.linear (a CPU without bf16 instructions cannot create the bf16 primitive)."""
    if dtype not in DTYPES or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        with self_check_context():  # not the caller's autocast or dispatch modes: the check is not the user's work
            gen = torch.Generator().manual_seed(0)  # not the global stream: a training run's draws stay as they were
            x, w, b = (torch.randn(*s, generator=gen).to(dtype) for s in ((3, 5, 8), (4, 8), (4,)))
            return agrees(onednn_linear(x, w, b, "gelu", "none"), F.gelu(F.linear(x, w, b)))
    except (AttributeError, RuntimeError):
        return False


# the three products of a linear layer's training step, each with two kernels; 2-D operands:
# x (M, K), weight (N, K), output gradient g (M, N)
PRODUCTS: dict[str, dict[str, Callable[..., torch.Tensor]]] = {
    "forward": {  # (x, weight, bias) -> x W^T + b
        "aten": F.linear,
        "onednn": onednn_linear,
    },
    "input_grad": {  # (g, weight) -> g W
        "aten": lambda g, w: g.mm(w),
        "onednn": lambda g, w: onednn_linear(g, w.t(), None),
    },
    "weight_grad": {  # (g, x) -> g^T x
        "aten": lambda g, x: g.t().mm(x),
        "onednn": lambda g, x: onednn_linear(g.t(), x.t(), None),
    },
}
"""product -> kernel name -> function. ``aten`` is what ``F.linear`` and its backward run (MKL's GEMM
on the CPU)."""


def _linear_flop(input_shape, weight_shape, *args, out_shape=None, **kwargs) -> int:
    """(..., K) x (N, K): 2 FLOPs per multiply-add."""
    rows = 1
    for n in input_shape[:-1]:
        rows *= n
    return 2 * rows * input_shape[-1] * weight_shape[0]


FLOP_FORMULAS = {torch.ops.mkldnn._linear_pointwise: _linear_flop}
"""``custom_mapping`` entries for ``torch.utils.flop_counter.FlopCounterMode``: the FLOPs of the op
this package adds, which torch's counter does not know."""
