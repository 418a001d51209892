"""Linear layers on the CPU fast paths: :class:`FusedLinear` (an ``nn.Linear``) and :func:`fused_linear`.

At inference one oneDNN call computes ``act(x Wᵀ + b)`` with the bias and GELU fused. In training
:class:`_Linear` (a ``torch.autograd.Function``) runs the three products of a linear layer (forward
``x Wᵀ + b``, input gradient ``g W``, weight gradient ``gᵀ x``) each through the kernel the plan names
for its size (:class:`~vision_attn.kernels.plan.LinearKernels`); a layer whose three products all stay
with ATen trains through ``F.linear``. The forward keeps the pre-activation for GELU's backward; the
bias is fused. Second derivatives (``create_graph=True``) are computed through the standard ops.

bf16: bf16 weights and inputs take the bf16 plan, and so does bf16 autocast on the CPU (Lightning's
``precision="bf16-mixed"``): input, weight and bias are cast to bfloat16 as autocast casts them for
``F.linear``, and the kernel runs on them.

The fast path is taken only where it is exactly a drop-in: CPU tensors in float32 or bfloat16 (or
bf16 autocast), outside graph capture (:mod:`~vision_attn.kernels.capture`), torch.func transforms
and forward-mode AD. Everywhere else, and under the ``"aten"`` plan, it is ``F.linear``.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.kernels.capture import autograd_transforms_active, capturing_graph, fx_tracing
from vision_attn.kernels.onednn import DTYPES, onednn_linear, onednn_pack
from vision_attn.kernels.plan import LinearKernels, current_plan

__all__ = ["FusedLinear", "fused_linear", "linear_act"]


class _Linear(torch.autograd.Function):
    """``act(x Wᵀ + b)`` with act GELU (``approximate`` "none" or "tanh") or none, each product
    (``macs`` multiply-adds, M*K*N) through the kernel ``kernels`` names for its size."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                approximate: str | None, kernels: LinearKernels, macs: int) -> torch.Tensor:
        h = kernels.kernel("forward", macs)(x, weight, bias)
        ctx.save_for_backward(x, weight, bias, h if approximate is not None else None)
        ctx.approximate, ctx.kernels, ctx.macs = approximate, kernels, macs
        return h if approximate is None else F.gelu(h, approximate=approximate)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, bias, h = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        if torch.is_grad_enabled():  # create_graph: the standard ops, which autograd can differentiate again
            inputs = [t for t, need in ((x, need_x), (weight, need_w), (bias, need_b)) if need]
            y = _standard(x, weight, bias, ctx.approximate)
            grads = iter(torch.autograd.grad(y, inputs, grad, create_graph=True))
            return (next(grads) if need_x else None, next(grads) if need_w else None,
                    next(grads) if need_b else None, None, None, None)
        if h is not None:
            grad = torch.ops.aten.gelu_backward(grad, h, approximate=ctx.approximate)
        g = grad.reshape(-1, grad.shape[-1])
        dx = ctx.kernels.kernel("input_grad", ctx.macs)(g, weight).view(x.shape) if need_x else None
        dw = ctx.kernels.kernel("weight_grad", ctx.macs)(g, x.reshape(-1, x.shape[-1])) if need_w else None
        db = g.sum(0) if need_b else None
        return dx, dw, db, None, None, None


def _standard(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, gelu: str | None) -> torch.Tensor:
    y = F.linear(x, weight, bias)
    return y if gelu is None else F.gelu(y, approximate=gelu)


def _compute_dtype(x: torch.Tensor, weight: torch.Tensor) -> torch.dtype | None:
    """The dtype the fast path would compute in, or None where only ``F.linear`` is a drop-in."""
    if x.device.type != "cpu" or weight.device.type != "cpu":
        return None
    if torch.is_autocast_enabled("cpu"):
        ok = torch.get_autocast_dtype("cpu") == torch.bfloat16 and x.dtype in DTYPES and weight.dtype in DTYPES
        return torch.bfloat16 if ok else None
    return x.dtype if x.dtype in DTYPES and weight.dtype == x.dtype else None


def fused_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                 gelu: str | None = None, packed: Callable[[], torch.Tensor | None] | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` over the last dimension, followed by ``F.gelu(.., approximate=gelu)``
    when ``gelu`` is ``"none"`` or ``"tanh"``; on the CPU through the kernels of the current plan.
    ``packed``: where inference takes oneDNN's kernel, gives ``weight`` already in oneDNN's layout
    (a frozen :class:`FusedLinear`'s copy; None: reorder it in the call)."""
    plan = current_plan()
    # torch.fx proxies (a caller that fx did not wrap), torch.func transforms and forward-mode AD
    # (which neither the oneDNN op nor the Function defines): the standard ops, before any self-check
    if not plan.fast_paths or capturing_graph() or fx_tracing(x, weight, bias) or autograd_transforms_active():
        return _standard(x, weight, bias, gelu)
    dtype = _compute_dtype(x, weight)
    macs = x.numel() * weight.shape[0]  # M*K*N of each of the three products
    if dtype is None or macs == 0:  # no multiply-adds (an empty batch): oneDNN's gradient primitives refuse it
        return _standard(x, weight, bias, gelu)
    choice = plan.choice(dtype)
    training = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                            or (bias is not None and bias.requires_grad))
    if (not choice.linear.any_onednn(macs) if training else choice.inference != "onednn"):
        return _standard(x, weight, bias, gelu)
    autocast = contextlib.nullcontext()
    if torch.is_autocast_enabled("cpu"):  # cast as autocast casts F.linear's arguments, then run without it
        x, weight = x.to(torch.bfloat16), weight.to(torch.bfloat16)
        bias = bias.to(torch.bfloat16) if bias is not None else None
        autocast = torch.autocast("cpu", enabled=False)
    with autocast:
        if training:
            return _Linear.apply(x, weight, bias, gelu, choice.linear, macs)
        ready = packed() if packed is not None else None
        if ready is not None and ready.dtype == x.dtype:
            weight = ready
        return onednn_linear(x, weight, bias, "gelu" if gelu is not None else "none", gelu or "")


torch.fx.wrap("fused_linear")  # torch.fx: one leaf node that chooses its kernels at run time, as eagerly


class FusedLinear(nn.Linear):
    """``nn.Linear`` whose forward runs :func:`fused_linear`: the same parameters, initialisation,
    state-dict keys and ``repr``; only the CPU kernel may differ (the plan's).

    :meth:`freeze` (for inference, see :func:`~vision_attn.kernels.freeze`): the layer keeps its weight
    packed in oneDNN's layout after the first inference call that takes oneDNN's kernel, instead of
    the kernel reordering it in every call. The copy is a plain attribute (not a buffer: never in the
    state dict), made again when the weight changes (another tensor, or an in-place write that
    autograd counts; not a write through ``.data``), and never used in training."""

    _packed: dict[str, tuple[tuple[int, int, torch.dtype], torch.Tensor]] | None = None  # None: not frozen

    def freeze(self) -> None:
        """Keep oneDNN's packed copies of the weight from now on."""
        self._packed = {}

    def packed_weight(self, layout: str = "plain",
                      make: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor | None:
        """The weight in oneDNN's layout (``make(weight)`` first, for a ``layout`` other than the weight
        as it is: a reordering of its rows), packed once while the weight is unchanged; None when the
        layer is not frozen."""
        if self._packed is None:
            return None
        w = self.weight
        key = (w.data_ptr(), w._version, w.dtype)
        hit = self._packed.get(layout)
        if hit is None or hit[0] != key:
            with torch.no_grad():
                src = (make(w) if make is not None else w).detach().contiguous()
                hit = (key, onednn_pack(src))
            self._packed[layout] = hit
        return hit[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_linear(x, self.weight, self.bias, packed=self.packed_weight if self._packed is not None else None)


def _hooked(module: nn.Module) -> bool:
    hooks = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    return any(getattr(module, h) for h in hooks) or any(getattr(nn.modules.module, f"_global{h}", None) for h in hooks)


def linear_act(layer: nn.Module, x: torch.Tensor, act: nn.Module) -> torch.Tensor:
    """``act(layer(x))``, as one fused kernel where ``layer`` is a plain :class:`FusedLinear` and
    ``act`` an ``nn.GELU``. Any other layer (a quantized or adapter-wrapped one, a subclass with its
    own forward) or a hooked one is called as a module, and so is the activation."""
    if (type(layer) is FusedLinear and type(act) is nn.GELU and not _hooked(layer) and not _hooked(act)):
        packed = layer.packed_weight if layer._packed is not None else None
        return fused_linear(x, layer.weight, layer.bias, act.approximate, packed=packed)
    return act(layer(x))
