"""Linear layers at inference on the CPU through oneDNN, with the bias and GELU fused.

On the CPU, ``nn.Linear`` calls MKL's GEMM (``addmm``): the bias is first copied into the output and
the activation is a second pass over it. Measured on this project's machine (AMD EPYC, 2 threads,
fp32, 2048^3): MKL 200 GFLOP/s, oneDNN's matmul primitive 430 GFLOP/s, with the same fp32 accuracy.
:func:`linear` calls that primitive (``torch.ops.mkldnn._linear_pointwise``, the op torch.compile's
CPU backend emits for the same pattern) with the bias and an exact or tanh GELU fused, which makes a
ViT forward pass about 1.9x faster here (docs/benchmarks.md).

The fast path is taken only where it is exactly a drop-in: CPU tensors in float32 or bfloat16, no
autograd graph being recorded (the op has no derivative), outside autocast, tracing, ONNX export and
torch.compile (which fuse by themselves). A layer whose ``weight`` is not a tensor (PyTorch's dynamically
quantized ``Linear``, where it is a method) is called as it is. Everywhere else, and when the op is missing or fails a
one-off self-check, it is ``F.linear``. ``VISION_ATTN_ONEDNN=0`` or :func:`set_onednn_linear` turns it off.
"""
from __future__ import annotations

import functools
import os
import platform

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

_enabled = os.environ.get("VISION_ATTN_ONEDNN", "1") != "0"


def set_onednn_linear(enabled: bool) -> bool:
    """Turn the oneDNN inference path of :func:`linear` on or off for the process; returns the
    previous setting, so a caller can restore it."""
    global _enabled
    previous, _enabled = _enabled, enabled
    return previous


@functools.cache
def _onednn_works() -> bool:
    """The op exists on this build and machine (x86-64, where it was measured) and agrees with F.linear."""
    if platform.machine().lower() not in ("x86_64", "amd64") or not torch.backends.mkldnn.is_available():
        return False
    try:
        op = torch.ops.mkldnn._linear_pointwise
        # outside any active dispatch mode (a FLOP counter, say): the check is not the user's work
        with torch.no_grad(), _disable_current_modes():
            x, w, b = torch.randn(3, 5, 8), torch.randn(4, 8), torch.randn(4)
            return torch.allclose(op(x, w, b, "gelu", [], "none"), F.gelu(F.linear(x, w, b)), atol=1e-5)
    except (AttributeError, RuntimeError):
        return False


def onednn_linear_available() -> bool:
    """oneDNN's fused linear kernel is usable on this build and machine (whether or not it is turned on)."""
    return _onednn_works()


def _fast_path(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (
        _enabled
        and not isinstance(x, torch.fx.Proxy)  # torch.fx symbolic tracing: keep the standard graph
        and x.device.type == "cpu"
        and x.dtype in (torch.float32, torch.bfloat16)
        and weight.dtype == x.dtype
        and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
        and not torch.is_autocast_enabled("cpu")
        and not torch.jit.is_tracing()
        and not torch.onnx.is_in_onnx_export()
        and not torch.compiler.is_compiling()
        and _onednn_works()
    )


def linear(x: torch.Tensor, layer: nn.Linear, act: nn.Module | None = None) -> torch.Tensor:
    """``act(layer(x))`` over the last dimension; on the CPU at inference, one fused oneDNN call
    when ``act`` is ``None`` or ``nn.GELU`` (any other activation runs after the fused linear)."""
    if not isinstance(layer.weight, torch.Tensor):  # a swapped-in module, e.g. a dynamically quantized Linear
        y = layer(x)
        return y if act is None else act(y)
    if _fast_path(x, layer.weight):
        fused_gelu = isinstance(act, nn.GELU)
        y = torch.ops.mkldnn._linear_pointwise(
            x, layer.weight, layer.bias, "gelu" if fused_gelu else "none", [], act.approximate if fused_gelu else "")
        return y if act is None or fused_gelu else act(y)
    y = F.linear(x, layer.weight, layer.bias)
    return y if act is None else act(y)
