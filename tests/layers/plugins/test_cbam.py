"""CBAM as in the paper (timm's CbamModule with the authors' biases) and the ultralytics form."""
from __future__ import annotations

import pytest
from timm.layers.cbam import CbamModule
import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.layers.plugins import CBAM, SpatialAttention, UltralyticsCBAM


def n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def timm_keys_to_ours(state: dict) -> dict:
    return {k.replace("spatial.conv.conv.", "spatial.conv.").replace("spatial.conv.bn.", "spatial.norm."): v
            for k, v in state.items()}


@pytest.mark.parametrize("channels", [32, 256])
@pytest.mark.parametrize("train", [False, True])
def test_same_numbers_as_timm_cbam_without_mlp_bias(channels, train):
    theirs = CbamModule(channels).train(train)
    ours = CBAM(channels, bias=False).train(train)
    ours.load_state_dict(timm_keys_to_ours(theirs.state_dict()), strict=True)
    x = torch.randn(2, channels, 9, 6)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-5)


def test_paper_structure_and_counts():
    cbam = CBAM(256)
    # shared MLP 256 -> 16 -> 256 with biases, 7x7 conv 2 -> 1 without bias, batch norm on its map
    assert n_params(cbam.channel) == 256 * 16 + 16 + 16 * 256 + 256
    assert n_params(cbam.spatial) == 2 * 7 * 7 + 2
    assert cbam.spatial.conv.bias is None and isinstance(cbam.spatial.norm, nn.BatchNorm2d)
    bare = CBAM(256, bias=False, spatial_norm=None)  # the paper's equations alone
    assert n_params(bare) == 2 * 256 * 16 + 2 * 7 * 7


def test_channel_attention_is_one_mlp_over_avg_and_max():
    cbam = CBAM(16, reduction=4).eval()
    x = torch.randn(2, 16, 5, 5)
    mlp = lambda v: cbam.channel.fc2(F.relu(cbam.channel.fc1(v)))  # noqa: E731
    expected = torch.sigmoid(mlp(x.mean((2, 3), keepdim=True)) + mlp(x.amax((2, 3), keepdim=True)))
    with torch.no_grad():
        torch.testing.assert_close(cbam.channel.attention(x), expected)


def test_spatial_attention_sees_mean_then_max():
    spatial = SpatialAttention(3, norm_layer=None)
    with torch.no_grad():
        spatial.conv.weight.zero_()
        spatial.conv.weight[0, 0, 1, 1] = 1.0  # the centre tap of the mean map only
    x = torch.randn(1, 4, 5, 5)
    with torch.no_grad():
        torch.testing.assert_close(spatial.attention(x), torch.sigmoid(x.mean(1, keepdim=True)))


# ultralytics.nn.modules.conv.CBAM (8.4.190): keys and sizes, read from its source
ULTRALYTICS_KEYS = {
    "channel_attention.fc.weight": (256, 256, 1, 1),
    "channel_attention.fc.bias": (256,),
    "spatial_attention.cv1.weight": (1, 2, 7, 7),
}


def test_ultralytics_form_has_its_structure_and_count():
    block = UltralyticsCBAM(256)
    assert n_params(block) == 65_890
    assert {k: tuple(v.shape) for k, v in block.state_dict().items()} == ULTRALYTICS_KEYS
    assert n_params(UltralyticsCBAM(256, 3)) == 65_890 - 2 * (49 - 9)  # positional kernel size, as there


def test_ultralytics_form_computes_what_its_source_does():
    block = UltralyticsCBAM(8).eval()
    x = torch.randn(2, 8, 6, 5)
    fc, cv1 = block.channel_attention.fc, block.spatial_attention.cv1
    y = x * torch.sigmoid(F.conv2d(F.adaptive_avg_pool2d(x, 1), fc.weight, fc.bias))
    maps = torch.cat([torch.mean(y, 1, keepdim=True), torch.max(y, 1, keepdim=True)[0]], 1)
    expected = y * torch.sigmoid(F.conv2d(maps, cv1.weight, padding=3))
    with torch.no_grad():
        torch.testing.assert_close(block(x), expected)
