"""Stochastic depth: drop a whole residual branch per sample."""
from __future__ import annotations

import torch
from torch import nn


def drop_path(x: torch.Tensor, drop_prob: float = 0.0, training: bool = False) -> torch.Tensor:
    """Zero the branch ``x`` for a random subset of samples and rescale the rest by 1/keep."""
    if drop_prob == 0.0 or not training:
        return x
    keep = 1.0 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # (B, 1, ..., 1): one draw per sample
    mask = x.new_empty(shape).bernoulli_(keep)
    return x * mask.div_(keep)


class DropPath(nn.Module):
    """Stochastic depth (Huang et al. 2016) applied to a residual branch; identity at evaluation."""

    def __init__(self, drop_prob: float = 0.0) -> None:
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return drop_path(x, self.drop_prob, self.training)

    def extra_repr(self) -> str:
        return f"drop_prob={self.drop_prob:.3f}"
