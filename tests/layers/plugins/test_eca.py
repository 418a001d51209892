"""ECA: the adaptive kernel size and timm's EcaModule's numbers."""
from __future__ import annotations

import pytest
import timm.layers
import torch

from vision_attn.layers.plugins import ECA, eca_kernel_size


@pytest.mark.parametrize("channels, k", [(4, 3), (64, 3), (128, 5), (256, 5), (512, 5), (1024, 5), (2048, 7)])
def test_adaptive_kernel_size(channels, k):
    assert eca_kernel_size(channels) == k == ECA(channels).conv.kernel_size[0]
    assert sum(p.numel() for p in ECA(channels).parameters()) == k


@pytest.mark.parametrize("channels", [16, 64, 256, 2048])
def test_same_numbers_as_timm_eca_module(channels):
    theirs = timm.layers.EcaModule(channels).eval()
    ours = ECA(channels).eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, channels, 4, 3)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=0, rtol=0)


def test_explicit_kernel_size():
    assert ECA(256, kernel_size=9).conv.kernel_size == (9,)
