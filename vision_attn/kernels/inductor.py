"""A model compiled once for inference by PyTorch's Inductor with freezing: :class:`InductorFrozen`.

What OpenVINO does when it compiles a model, done by PyTorch's own compiler: the weights folded in
as constants in the precision, the linear and convolution weights packed once in oneDNN's layout,
attention lowered to one fused kernel, and the element-wise chains around it (bias, GELU, residual
adds, layer norms) generated as fused loops (``torch.compile(..., options={"freezing": True})``
under ``no_grad``). It needs a C++ compiler on the host; :func:`inductor_works` says whether one
compiles here.

A graph is compiled for each batch size it is first called with (static shapes: they run faster on
the CPU than a dynamic graph); a smaller batch is padded to the nearest batch already compiled and its
outputs cut back, so an evaluation's last, short batch costs no second compilation.
"""
from __future__ import annotations

import functools
import os
import shutil
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map

__all__ = ["InductorFrozen", "inductor_works"]


@functools.cache
def inductor_works() -> bool:
    """Whether Inductor can compile here: a C++ compiler (``$CXX``, else g++ or clang++) on the path."""
    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "clang++"]
    return any(shutil.which(n) for n in names)


class InductorFrozen:
    """``model`` (in place: eval mode, no gradients, parameters in ``dtype``) compiled by Inductor with
    freezing; called on inputs in ``dtype`` under ``no_grad`` or ``inference_mode``."""

    def __init__(self, model: nn.Module, dtype: torch.dtype = torch.float32) -> None:
        self.model = model.eval().requires_grad_(False).to(dtype)
        self._compiled = torch.compile(self.model, dynamic=False, options={"freezing": True})
        self.batches: list[int] = []  # the batch sizes compiled so far

    def __call__(self, x: torch.Tensor) -> Any:
        n = x.shape[0]
        size = min((b for b in self.batches if b >= n), default=n)
        if size == n and n not in self.batches:
            self.batches.append(n)
        if size > n:  # padded to a batch compiled already, the outputs cut back
            x = torch.cat([x, x.new_zeros(size - n, *x.shape[1:])])
        out = self._compiled(x)
        if size == n:
            return out
        return tree_map(lambda t: t[:n] if isinstance(t, torch.Tensor) and t.dim() and t.shape[0] == size else t, out)
