"""Stochastic depth: whole samples dropped in training, rescaled so the expectation is kept."""
from __future__ import annotations

import torch

from vision_attn.layers import DropPath, drop_path


def test_identity_in_eval():
    x = torch.randn(64, 5, 8)
    layer = DropPath(0.5).eval()
    assert torch.equal(layer(x), x)
    assert torch.equal(drop_path(x, 0.5, training=False), x)


def test_zero_rate_is_identity_in_training():
    x = torch.randn(64, 5, 8)
    assert torch.equal(DropPath(0.0).train()(x), x)


def test_training_drops_about_half_and_keeps_the_expectation():
    torch.manual_seed(1)
    x = torch.ones(20000, 4, 3)
    out = DropPath(0.5).train()(x)
    per_sample = out.reshape(out.shape[0], -1)
    dropped = (per_sample == 0).all(dim=1)
    kept = (per_sample == 2.0).all(dim=1)  # survivors are rescaled by 1 / keep = 2
    assert bool((dropped | kept).all()), "each sample is dropped or kept as a whole"
    assert abs(dropped.float().mean().item() - 0.5) < 0.02
    assert abs(out.mean().item() - 1.0) < 0.03


def test_expectation_with_other_rate():
    torch.manual_seed(2)
    x = torch.randn(1, 16).expand(40000, 16).contiguous()
    out = drop_path(x, 0.2, training=True)
    dropped = (out == 0).all(dim=1).float().mean().item()
    assert abs(dropped - 0.2) < 0.015
    torch.testing.assert_close(out.mean(dim=0), x[0], atol=0.05, rtol=0.05)
    assert "drop_prob=0.200" in repr(DropPath(0.2))
