"""The registry: every name builds, has the peer's parameter count, trains and gives feature maps."""
from __future__ import annotations

import math

import pytest
import timm
import torch
import torchvision

import vision_attn
from vision_attn.models.vit import VisionTransformer

from .small import STOOD_FOR

TORCHVISION_NAMES = {"vit_b_16", "vit_b_32", "vit_l_16", "swin_t", "swin_s", "swin_b", "swin_v2_t", "swin_v2_s", "swin_v2_b"}
ALL_NAMES = vision_attn.list_models()


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_registry_holds_the_expected_families():
    assert TORCHVISION_NAMES <= set(ALL_NAMES)
    assert {"vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224",
            "deit_tiny_distilled_patch16_224"} <= set(ALL_NAMES)
    assert ALL_NAMES == sorted(ALL_NAMES)


@pytest.mark.parametrize("name", [n for n in ALL_NAMES if n not in STOOD_FOR])  # the others: see small.py
def test_parameter_count_equals_peer(name):
    with torch.device("meta"):  # no memory, no init cost, even for ViT-L
        ours = vision_attn.create_model(name)
        if name in TORCHVISION_NAMES:
            peer = torchvision.models.get_model(name, weights=None)
        else:
            peer = timm.create_model(name)
    assert n_params(ours) == n_params(peer) > 0


@pytest.mark.parametrize("name, count", [
    ("vit_tiny_patch16_224", 5_717_416),
    ("vit_small_patch16_224", 22_050_664),
    ("vit_base_patch16_224", 86_567_656),
    ("deit_small_distilled_patch16_224", 22_436_432),
])
def test_parameter_count_exact(name, count):
    with torch.device("meta"):
        assert n_params(vision_attn.create_model(name)) == count


def _small(name: str, **extra) -> VisionTransformer:
    """The variant ``name`` with one block at a 2x3 patch grid (non-square on purpose); a width over
    2048 (DINOv3 7B's 4096, 25 s a step here) runs at 512, its heads and block kinds unchanged."""
    with torch.device("meta"):
        meta = vision_attn.create_model(name)
    patch = meta.patch_embed.patch_size[0]
    width = dict(embed_dim=512) if meta.embed_dim > 2048 else {}
    return vision_attn.create_model(name, depth=1, img_size=(2 * patch, 3 * patch), num_classes=7, **width, **extra)


CNN_NAMES = set(vision_attn.list_models("resnet*"))  # torchvision's ResNets: tests/models/test_cnn.py
CONVNEXT_NAMES = set(vision_attn.list_models("convnext*"))  # tests/models/test_convnext.py
SWIN_NAMES = set(vision_attn.list_models("swin*"))  # hierarchical: tests/models/test_swin.py
HIERA_NAMES = set(vision_attn.list_models("*hiera*")) | {"hieradet_small"}  # tests/models/test_hiera.py


@pytest.mark.parametrize("name", [n for n in ALL_NAMES if n not in CNN_NAMES | SWIN_NAMES | CONVNEXT_NAMES | HIERA_NAMES | STOOD_FOR])
def test_small_variant_trains(name):
    model = _small(name).train()
    p = model.patch_embed.patch_size[0]
    x = torch.randn(2, 3, 2 * p, 3 * p)
    out = model(x)
    if model.distilled:
        assert isinstance(out, tuple) and len(out) == 2
        assert all(o.shape == (2, 7) for o in out)
        loss = out[0].square().sum() + out[1].square().sum()
    else:
        assert isinstance(out, torch.Tensor) and out.shape == (2, 7)
        loss = out.square().sum()
    loss.backward()
    for key, param in model.named_parameters():
        assert param.grad is not None, f"{key} got no gradient"
        assert torch.isfinite(param.grad).all(), f"{key} has a non-finite gradient"
        assert param.grad.abs().sum() > 0, f"{key} got an all-zero gradient"

    model.eval()
    with torch.no_grad():
        out = model(x)
        maps = model.forward_intermediates(x, indices=1, intermediates_only=True)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 7)
    assert len(maps) == 1
    assert maps[0].shape == (2, model.embed_dim, 2, 3)


def test_unknown_name_suggests_close_match():
    with pytest.raises(vision_attn.ConfigError, match="vit_small_patch16_224") as info:
        vision_attn.create_model("vit_smal_patch16_224")
    assert "vit_smal_patch16_224" in str(info.value)


def test_unknown_name_without_close_match_says_how_to_list():
    with pytest.raises(vision_attn.ConfigError, match="vision-attn models"):
        vision_attn.create_model("qqqqqqqq")


def test_list_models_pattern():
    assert vision_attn.list_models("deit_*distilled*") == [
        "deit_base_distilled_patch16_224", "deit_small_distilled_patch16_224", "deit_tiny_distilled_patch16_224",
    ]
    assert vision_attn.list_models("vit_b_*") == ["vit_b_16", "vit_b_32"]
    assert vision_attn.list_models("no_such_*") == []


def test_overrides_reach_the_model():
    model = vision_attn.create_model("vit_tiny_patch16_224", depth=2, img_size=48, num_classes=5)
    assert len(model.blocks) == 2
    assert model.patch_embed.grid_size == (3, 3)
    assert model.pos_embed.shape == (1, 1 + 9, 192)
    assert model.head.out_features == 5
    assert math.isclose(model.blocks[0].mlp.fc1.out_features / 192, 4.0)
