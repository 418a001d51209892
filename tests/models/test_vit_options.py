"""VisionTransformer options by name: position embeddings, blocks, and their checks."""
from __future__ import annotations

import pytest
import torch

import vision_attn
from vision_attn.layers import PostNormBlock

KW = dict(depth=2, img_size=32, num_classes=5)  # vit_tiny: 2 blocks, 2x2 grid at 32 px


def tiny(**kwargs):
    return vision_attn.create_model("vit_tiny_patch16_224", **{**KW, **kwargs})


@pytest.mark.parametrize("kind", ["sincos2d", "rope", "none"])
def test_parameter_free_position_embeddings(kind):
    model = tiny(pos_embed=kind).eval()
    assert model.pos_embed is None
    names = {n for n, _ in model.named_parameters()}
    assert not any("pos" in n or "rope" in n for n in names)
    # the state dict is the learned model's, less the table: nothing extra
    assert set(model.state_dict()) == set(tiny().state_dict()) - {"pos_embed"}
    with torch.no_grad():  # any patch multiple runs, at two sizes and a non-square one
        for size in [(32, 32), (48, 64)]:
            out = model(torch.randn(2, 3, *size))
            assert out.shape == (2, 5) and torch.isfinite(out).all()


def _shift_one_patch(x: torch.Tensor) -> torch.Tensor:
    return torch.roll(x, shifts=16, dims=-1)  # moves whole patches: a permutation of the tokens


@pytest.mark.parametrize("kind, sees_position", [("none", False), ("sincos2d", True), ("rope", True), ("learn", True)])
def test_position_information_reaches_the_output(kind, sees_position):
    model = tiny(pos_embed=kind, img_size=48).eval()
    if kind == "learn":
        with torch.no_grad():
            model.pos_embed.normal_(std=0.5)
    x = torch.randn(1, 3, 48, 48)
    with torch.no_grad():
        diff = (model(x) - model(_shift_one_patch(x))).abs().max().item()
    if sees_position:
        assert diff > 1e-4
    else:
        assert diff < 1e-5  # without positions the tokens are a set


def test_rope_model_trains_at_two_sizes():
    model = tiny(pos_embed="rope").train()
    for size in (32, 64):
        model.zero_grad()
        model(torch.randn(2, 3, size, size)).sum().backward()
        assert all(p.grad is not None for p in model.parameters())


def test_unknown_position_embedding():
    with pytest.raises(vision_attn.ConfigError, match="pos_embed='alibi'"):
        tiny(pos_embed="alibi")


def test_post_norm_blocks_build_and_run():
    model = tiny(block="post")
    assert all(type(b) is PostNormBlock for b in model.blocks)
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 5)
    out.sum().backward()
    assert model.blocks[0].attn.qkv.weight.grad is not None
    with pytest.raises(vision_attn.ConfigError, match="block="):
        tiny(block="sandwich")


@pytest.mark.parametrize("kwargs, match", [
    (dict(global_pool="max"), "global_pool"),
    (dict(class_token=False), "class_token"),
    (dict(class_token=False, global_pool="avg", distilled=True), "distilled"),
    (dict(num_heads=5), "num_heads"),
])
def test_bad_configuration(kwargs, match):
    with pytest.raises(vision_attn.ConfigError, match=match):
        tiny(**kwargs)


def test_dynamic_img_pad_runs_odd_sizes():
    model = tiny(dynamic_img_pad=True).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 33, 40)).shape == (1, 5)
        assert model.forward_intermediates(torch.randn(1, 3, 33, 40), indices=1, intermediates_only=True)[0].shape == (1, 192, 3, 3)
    with pytest.raises(vision_attn.DataError, match="dynamic_img_pad=True"):
        tiny()(torch.randn(1, 3, 33, 40))
