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


def assert_like_timm(ours: nn.Module, peer: nn.Module, sizes, indices: int = 2, atol: float = 1e-4) -> None:
    """At each image size (h, w) of ``sizes``: logits, unpooled features and ``forward_intermediates``
    (the final tokens and the last ``indices`` maps) of ``ours`` within ``atol`` of timm's ``peer``."""
    for size in sizes:
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            torch.testing.assert_close(ours(x), peer(x), atol=atol, rtol=0)
            torch.testing.assert_close(ours.forward_features(x), peer.forward_features(x), atol=atol, rtol=0)
            final, maps = ours.forward_intermediates(x, indices=indices)
            peer_final, peer_maps = peer.forward_intermediates(x, indices=indices)
        torch.testing.assert_close(final, peer_final, atol=atol, rtol=0)
        for a, b in zip(maps, peer_maps, strict=True):
            torch.testing.assert_close(a, b, atol=atol, rtol=0)
