"""Coordinate attention: the authors' widths and timm's CoordAttn's numbers."""
from __future__ import annotations

import pytest
from timm.layers.coord_attn import CoordAttn
import torch
from torch import nn

from vision_attn.layers.plugins import CoordAttention


@pytest.mark.parametrize("channels, rd", [(16, 8), (256, 8), (384, 12), (512, 16), (2048, 64)])
def test_reduced_width_is_the_authors(channels, rd):
    assert CoordAttention(channels).conv1.out_channels == rd  # max(8, C // 32)


def test_structure():
    ca = CoordAttention(64)
    assert isinstance(ca.bn1, nn.BatchNorm2d) and isinstance(ca.act, nn.Hardswish)
    assert ca.conv_h.bias is not None and ca.conv_w.out_channels == 64


@pytest.mark.parametrize("channels", [32, 256])
@pytest.mark.parametrize("train", [False, True])
def test_same_numbers_as_timm_coord_attn(channels, train):
    theirs = CoordAttn(channels).train(train)
    ours = CoordAttention(channels, rd_channels=theirs.conv1.out_channels, bias=False).train(train)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, channels, 7, 11)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-5)
