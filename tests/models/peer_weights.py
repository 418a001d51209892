"""Weights for parity tests against a peer: every parameter random, so that no part of a key map goes
untested (a map that swaps two tensors initialised alike would pass on a fresh model)."""
from __future__ import annotations

import torch
from torch import nn


def randomise(model: nn.Module, seed: int = 0) -> nn.Module:
    """Every parameter of ``model`` drawn afresh (0.2 * N(0, 1); LayerNorm weights about 1); eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                base = 1.0 if isinstance(module, nn.LayerNorm) and name == "weight" else 0.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))
    return model.eval()
