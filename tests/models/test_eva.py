"""EVA-02 under timm's names against timm's Eva: the same keys and parameter counts at full size,
timm's random file loaded with timm's outputs (logits, features, intermediates) at the file's size
and another, features_only maps."""
from __future__ import annotations

import pytest
import timm
import torch

import vision_attn

from .peer_weights import assert_built_like_timm, assert_like_timm, randomise

NAMES = ["eva02_tiny_patch14_224", "eva02_small_patch14_224", "eva02_base_patch14_224"]
# 2 blocks of width 48 (3 heads of 16 channels), 56 px: a 4x4 grid (timm's rope stays scaled to 16x16)
SMALL = dict(depth=2, embed_dim=48, num_heads=3, img_size=56, num_classes=5)


@pytest.mark.parametrize("name", NAMES)
def test_keys_parameter_counts_and_configuration_are_timms(name):
    assert_built_like_timm(name)


@pytest.mark.parametrize("name", ["eva02_tiny_patch14_224", "eva02_base_patch14_224"])  # fused / separate + sub-LN
def test_timm_file_same_outputs_at_two_sizes(tmp_path, name):
    peer = randomise(timm.create_model(name, pretrained=False, dynamic_img_size=True, **SMALL)).eval()
    path = tmp_path / "eva.pth"
    torch.save(peer.state_dict(), path)
    ours = vision_attn.create_model(name, pretrained=path, **SMALL).eval()
    assert_like_timm(ours, peer, [(56, 56), (42, 70)])  # the file's grid, and another (3x5)


def test_features_only_maps_are_timms(tmp_path):
    name = "eva02_small_patch14_224"
    peer = randomise(timm.create_model(name, pretrained=False, **SMALL)).eval()
    path = tmp_path / "eva.pth"
    torch.save(peer.state_dict(), path)
    theirs = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path), num_classes=5),
                               features_only=True, out_indices=(0, 1), **SMALL).eval()
    ours = vision_attn.create_model(name, pretrained=path, features_only=True, out_indices=(0, 1), **SMALL).eval()
    x = torch.randn(2, 3, 56, 56)
    with torch.no_grad():
        got, want = ours(x), theirs(x)
    assert [tuple(m.shape) for m in got] == [(2, 48, 4, 4)] * 2
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0)
