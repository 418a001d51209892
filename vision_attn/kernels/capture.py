"""Whether a graph is being captured, asked in one place.

The CPU kernels of this package run only in eager mode. While a graph is captured for another
runtime (TorchScript tracing, either ONNX exporter, ``torch.compile``, ``torch.export``) the layers
emit the standard ops, which those runtimes know and fuse by themselves. torch.fx symbolic tracing
is different: its graph runs in PyTorch, so the kernel dispatchers are recorded as leaf calls
(``torch.fx.wrap``) and choose at run time exactly as the eager model does.
"""
from __future__ import annotations

import torch
import torch.autograd.forward_ad as forward_ad

__all__ = ["capturing_graph", "onnx_exporting", "fx_tracing", "tracing", "autograd_transforms_active", "fake"]


def capturing_graph() -> bool:
    """Inside TorchScript tracing, ONNX export, torch.compile or torch.export (which compiles)."""
    return torch.jit.is_tracing() or torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling()


def onnx_exporting() -> bool:
    """Inside ONNX export (either exporter)."""
    return torch.onnx.is_in_onnx_export()


def fx_tracing(*values: object) -> bool:
    """Any of ``values`` is a torch.fx proxy: torch.fx is tracing symbolically."""
    return any(isinstance(v, torch.fx.Proxy) for v in values)


def tracing(*values: object) -> bool:
    """:func:`capturing_graph`, or any of ``values`` a torch.fx proxy: code that caches or writes in
    place must build in the graph instead."""
    return capturing_graph() or fx_tracing(*values)


def fake(*values: object) -> bool:
    """Any of ``values`` is a FakeTensor (shape propagation of compile and export)."""
    return any(isinstance(v, torch._subclasses.FakeTensor) for v in values)


def autograd_transforms_active() -> bool:
    """torch.func transforms or forward-mode AD, which a custom ``autograd.Function`` does not define."""
    return torch._C._are_functorch_transforms_active() or forward_ad._current_level >= 0
