"""Swin's reordering of tokens into windows with a gradient that is a gather too: :func:`gather_tokens`.

``x.index_select(1, index)`` for a permutation ``index``: the generic gradient of ``index_select``
zero-fills a tensor and scatter-adds into it; a permutation's gradient is the gather by its inverse
(one copy). Under graph capture the standard op runs.
"""
from __future__ import annotations

from typing import Any

import torch

from vision_attn.kernels.capture import tracing

__all__ = ["gather_tokens"]


class _GatherTokens(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, index: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
        ctx.inverse = inverse
        return x.index_select(1, index)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return grad.index_select(1, ctx.inverse), None, None


def gather_tokens(x: torch.Tensor, index: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    """Tokens (B, L, C) reordered by the permutation ``index`` (L,); ``inverse`` undoes it."""
    if tracing(x) or not (torch.is_grad_enabled() and x.requires_grad):
        return x.index_select(1, index)
    return _GatherTokens.apply(x, index, inverse)
