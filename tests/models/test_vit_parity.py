"""ViT/DeiT numbers against timm and torchvision: peer weights in, same logits out (float32)."""
from __future__ import annotations

import pytest
import timm
import torch
import torchvision
from safetensors.torch import save_file
from timm.layers import resample_abs_pos_embed as timm_resample
from timm.models.vision_transformer import VisionTransformer as TimmViT
from timm.models.vision_transformer import checkpoint_filter_fn

import vision_attn
from vision_attn.models import load_checkpoint
from vision_attn.models.vit import VisionTransformer, timm_to_torchvision

ATOL = 1e-4


def assert_close(a: torch.Tensor, b: torch.Tensor, atol: float = ATOL) -> None:
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = (a - b).abs().max().item()
    assert diff <= atol, f"max abs diff {diff:.3g} > {atol}"


def save(state_dict: dict, path) -> str:
    """Write ``state_dict`` as .pth or .safetensors, chosen by the suffix of ``path``."""
    if str(path).endswith(".safetensors"):
        save_file({k: v.contiguous() for k, v in state_dict.items()}, str(path))
    else:
        torch.save(state_dict, path)
    return str(path)


def randomise(model: torch.nn.Module) -> torch.nn.Module:
    """Give every parameter non-trivial values (zero-initialised tokens, biases and heads included),
    so that a weight that fails to load shows in the logits."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=0.02 if p.ndim > 1 else 0.1)
    return model


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "deit_tiny_patch16_224", "deit_tiny_distilled_patch16_224"])
@pytest.mark.parametrize("img_size", [224, 160])
@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_timm_weights_same_logits(tmp_path, name, img_size, suffix):
    peer = randomise(timm.create_model(name, img_size=img_size)).eval()
    path = save(peer.state_dict(), tmp_path / f"w{suffix}")
    ours = vision_attn.create_model(name, pretrained=path, img_size=img_size).eval()
    x = torch.randn(2, 3, img_size, img_size)
    with torch.no_grad():
        assert_close(ours(x), peer(x))


@pytest.mark.parametrize("name, n_prefix", [("vit_tiny_patch16_224", 1), ("deit_tiny_distilled_patch16_224", 2)])
def test_224_weights_into_160_model_resample_like_timm(tmp_path, name, n_prefix):
    peer224 = randomise(timm.create_model(name)).eval()
    state = peer224.state_dict()
    path = save(state, tmp_path / "w224.pth")

    ours = vision_attn.create_model(name, pretrained=path, img_size=160).eval()
    expected_pos = timm_resample(state["pos_embed"], new_size=(10, 10), num_prefix_tokens=n_prefix)
    assert ours.pos_embed.shape == (1, n_prefix + 100, 192)
    assert_close(ours.pos_embed.detach(), expected_pos, atol=1e-6)

    peer160 = timm.create_model(name, img_size=160).eval()
    peer160.load_state_dict(checkpoint_filter_fn(state, peer160))
    assert_close(peer160.pos_embed.detach(), expected_pos, atol=1e-6)
    x = torch.randn(2, 3, 160, 160)
    with torch.no_grad():
        assert_close(ours(x), peer160(x))


def test_dynamic_image_size_at_run_time(tmp_path):
    peer = randomise(timm.create_model("vit_tiny_patch16_224", dynamic_img_size=True)).eval()
    ours = vision_attn.create_model("vit_tiny_patch16_224", pretrained=save(peer.state_dict(), tmp_path / "w.pth"))
    ours.eval()
    x = torch.randn(2, 3, 192, 256)
    with torch.no_grad():
        out = ours(x)
        assert_close(out, peer(x))
        # at the configured size the table is used as it is: also equal
        x224 = torch.randn(1, 3, 224, 224)
        assert_close(ours(x224), peer(x224))
    assert out.shape == (2, 1000)


def test_torchvision_vit_b_16_weights_and_round_trip(tmp_path):
    tv = torchvision.models.get_model("vit_b_16", weights=None).eval()
    with torch.no_grad():  # torchvision initialises its head to zeros: logits would all be 0
        torch.nn.init.normal_(tv.heads.head.weight, std=0.02)
        torch.nn.init.normal_(tv.heads.head.bias, std=0.1)
        torch.nn.init.normal_(tv.class_token, std=0.5)
    path = save(tv.state_dict(), tmp_path / "vit_b_16.pth")
    ours = vision_attn.create_model("vit_b_16", pretrained=path).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        expected = tv(x)
        assert expected.abs().max() > 0.1
        out = ours(x)
    assert_close(out, expected)

    back = torchvision.models.get_model("vit_b_16", weights=None).eval()
    back.load_state_dict(timm_to_torchvision(ours.state_dict()), strict=True)
    with torch.no_grad():
        assert_close(back(x), expected)


def test_distilled_outputs_by_mode(tmp_path):
    kwargs = dict(depth=2, img_size=32, num_classes=10)
    peer = randomise(timm.create_model("deit_tiny_distilled_patch16_224", **kwargs))
    ours = vision_attn.create_model("deit_tiny_distilled_patch16_224",
                                    pretrained=save(peer.state_dict(), tmp_path / "w.pth"), **kwargs)
    peer.set_distilled_training(True)  # timm's default is False; ours is True
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        ours.train(), peer.train()
        out = ours(x)
        assert isinstance(out, tuple) and len(out) == 2
        cls, dist = out
        peer_cls, peer_dist = peer(x)
        assert_close(cls, peer_cls)
        assert_close(dist, peer_dist)
        assert (cls - dist).abs().max() > 1e-3  # two different heads

        ours.eval()
        mean = ours(x)
        assert isinstance(mean, torch.Tensor)
        assert_close(mean, (cls + dist) / 2, atol=1e-5)
        assert_close(mean, peer.eval()(x))

        ours.set_distilled_training(False)
        ours.train()
        out = ours(x)
        assert isinstance(out, torch.Tensor)
        assert_close(out, mean, atol=1e-5)


@pytest.mark.parametrize("indices", [[2, 5, 11], 3, [-1, 0]])
@pytest.mark.parametrize("norm", [False, True])
def test_forward_intermediates_like_timm(tmp_path, indices, norm):
    peer = randomise(timm.create_model("vit_tiny_patch16_224", img_size=64)).eval()
    ours = vision_attn.create_model("vit_tiny_patch16_224", img_size=64,
                                    pretrained=save(peer.state_dict(), tmp_path / "w.pth")).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        got = ours.forward_intermediates(x, indices=indices, norm=norm, intermediates_only=True)
        want = peer.forward_intermediates(x, indices=indices, norm=norm, intermediates_only=True)
    n = indices if isinstance(indices, int) else len(indices)
    assert len(got) == len(want) == n
    for a, b in zip(got, want):
        assert a.shape == (2, 192, 4, 4)
        assert_close(a, b)


def test_forward_intermediates_rejects_bad_indices():
    model = vision_attn.create_model("vit_tiny_patch16_224", depth=2, img_size=32)
    with pytest.raises(vision_attn.ConfigError, match="indices"):
        model.forward_intermediates(torch.randn(1, 3, 32, 32), indices=3)


SMALL = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10)


@pytest.mark.parametrize("options", [
    dict(global_pool="avg"),
    dict(reg_tokens=4, no_embed_class=True),
    dict(reg_tokens=4, no_embed_class=True, global_pool="avg"),
    dict(class_token=False, global_pool="avg"),
    dict(init_values=1e-1, qk_norm=True),
])
def test_timm_options_parity(tmp_path, options):
    peer = randomise(TimmViT(**SMALL, **options)).eval()
    ours = VisionTransformer(**SMALL, **options).eval()
    assert set(ours.state_dict()) == set(peer.state_dict())
    load_checkpoint(ours, save(peer.state_dict(), tmp_path / "w.safetensors"))
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert_close(ours(x), peer(x))
    if options.get("global_pool") == "avg":
        assert isinstance(ours.fc_norm, torch.nn.LayerNorm) and isinstance(ours.norm, torch.nn.Identity)
