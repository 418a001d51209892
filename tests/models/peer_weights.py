"""Weights for parity tests against a peer: every parameter random, so that no part of a key map goes
untested (a map that swaps two tensors initialised alike would pass on a fresh model); and the
comparisons with timm that several families' tests make."""
from __future__ import annotations

import timm
import torch
from torch import nn

import vision_attn


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


def assert_built_like_timm(name: str) -> None:
    """``name`` on the meta device, ours and timm's: the same state-dict keys and shapes, parameter
    count, classes and features, and input configuration."""
    with torch.device("meta"):
        ours, theirs = vision_attn.create_model(name), timm.create_model(name, pretrained=False)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    assert (ours.num_classes, ours.num_features) == (theirs.num_classes, theirs.num_features)
    for field in ("input_size", "interpolation", "crop_pct", "mean", "std", "num_classes", "first_conv"):
        assert ours.pretrained_cfg[field] == theirs.pretrained_cfg[field], field
