"""LayerScale (CaiT, Touvron et al. 2021): a learned per-channel scale on a residual branch."""
from __future__ import annotations

import torch
from torch import nn


class LayerScale(nn.Module):
    """Multiply the last dimension by a learned vector ``gamma`` initialised to ``init_values``."""

    def __init__(self, dim: int, init_values: float = 1e-5) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init_values)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma
