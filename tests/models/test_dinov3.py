"""DINOv3 ViTs under timm's names against timm's Eva: the same keys and parameter counts for every
variant (meta device), timm's random file loaded with timm's outputs (pooled features, logits,
intermediates) at the file's size and another, in eval mode; in training, with the coordinate
augmentation set, the same draws give the same outputs."""
from __future__ import annotations

import pytest
import safetensors.torch
import timm
import torch

import vision_attn

from .peer_weights import assert_built_like_timm, assert_like_timm, randomise

NAMES = timm.list_models("*dinov3*")
# 2 blocks of width 48 (3 heads of 16 channels), 64 px: a 4x4 grid
SMALL = dict(depth=2, embed_dim=48, num_heads=3, img_size=64)


def test_every_timm_dinov3_name_is_registered():
    assert set(NAMES) <= set(vision_attn.list_models("*dinov3*")) and len(NAMES) >= 12


@pytest.mark.parametrize("name", NAMES)
def test_keys_parameter_counts_and_configuration_are_timms(name):
    assert_built_like_timm(name)


@pytest.mark.parametrize("name,kwargs,suffix", [("vit_small_patch16_dinov3", {}, ".pth"),
                                                ("vit_small_plus_patch16_dinov3_qkvb", dict(num_classes=5), ".safetensors")])
def test_timm_file_same_outputs_at_two_sizes(tmp_path, name, kwargs, suffix):
    """GELU MLP without qkv bias (pooled features), SwiGLU with q/v biases and a classifier (logits),
    saved as timm saves them (torch.save, or safetensors as on the Hub)."""
    peer = randomise(timm.create_model(name, pretrained=False, **SMALL, **kwargs)).eval()
    path = tmp_path / f"dinov3{suffix}"
    if suffix == ".pth":
        torch.save(peer.state_dict(), path)
    else:
        safetensors.torch.save_file(peer.state_dict(), str(path))
    ours = vision_attn.create_model(name, pretrained=path, **SMALL, **kwargs).eval()
    assert_like_timm(ours, peer, [(64, 64), (48, 80)])  # the file's grid, and another (3x5)


def test_training_augmentation_draws_as_timm(tmp_path):
    """Shift, jitter and rescale of the rotary coordinates, in training only: the same seed, the same
    outputs as timm's; in eval mode none (outputs equal to an unaugmented model's)."""
    name = "vit_small_patch16_dinov3"
    aug = dict(shift=0.5, jitter=1.5, rescale=2.0)
    peer = randomise(timm.create_model(name, pretrained=False, **SMALL, **{f"rope_{k}_coords": v for k, v in aug.items()}))
    path = tmp_path / "dinov3.pth"
    torch.save(peer.state_dict(), path)
    ours = vision_attn.create_model(name, pretrained=path, **SMALL, **{f"rope_{k}": v for k, v in aug.items()})
    plain = vision_attn.create_model(name, pretrained=path, **SMALL).eval()
    x = torch.randn(2, 3, 64, 64)
    peer.train(), ours.train()
    with torch.no_grad():
        torch.manual_seed(3)
        want = peer(x)
        torch.manual_seed(3)
        got = ours(x)
        again = ours(x)  # another draw
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    assert (again - got).abs().max() > 1e-3
    ours.eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(x), plain(x), atol=0, rtol=0)
