"""Squeeze-and-Excitation: timm's SEModule's numbers, widths and keys."""
from __future__ import annotations

import pytest
import timm.layers
import torch
from timm.layers.helpers import make_divisible

from vision_attn.layers.plugins import SqueezeExcite, reduced_channels


@pytest.mark.parametrize("channels", [8, 24, 64, 100, 200, 256, 1000, 2048])
@pytest.mark.parametrize("reduction, divisor", [(16, 8), (16, 1), (4, 8), (8, 4)])
def test_reduced_width_equals_timm(channels, reduction, divisor):
    assert reduced_channels(channels, reduction, divisor) == make_divisible(
        channels / reduction, divisor, round_limit=0.0)


@pytest.mark.parametrize("channels", [16, 64, 200, 256])
def test_same_numbers_as_timm_se_module(channels):
    theirs = timm.layers.SEModule(channels).eval()
    ours = SqueezeExcite(channels).eval()
    assert ours.load_state_dict(theirs.state_dict(), strict=True)  # same keys and shapes
    x = torch.randn(2, channels, 7, 5)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=0, rtol=0)


def test_parameter_counts():
    # 256 -> 16 -> 256 with biases; the widths of SE-ResNet-50's blocks
    assert sum(p.numel() for p in SqueezeExcite(256).parameters()) == 256 * 16 + 16 + 16 * 256 + 256
    assert SqueezeExcite(2048).fc1.out_channels == 128
    assert SqueezeExcite(64, rd_channels=5).fc1.out_channels == 5
    assert SqueezeExcite(64, bias=False).fc1.bias is None
