"""Swin models: parameter counts equal the peers', every variant trains, any input size runs, stage
feature maps have strides 4/8/16/32, nothing but parameters in the state dict, FLOPs match the
paper, and bad input gives clear errors."""
from __future__ import annotations

import json

import pytest
import timm
import torch
import torchvision

import vision_attn
from vision_attn.kernels import accelerate
from vision_attn import CheckpointError, ConfigError, DataError
from vision_attn.analysis import count_model_flops
from vision_attn.cli import main
from vision_attn.layers import TimmWindows, TorchvisionWindows
from vision_attn.models.swin import SwinTransformer

SWIN_NAMES = [n for n in vision_attn.list_models("swin*") if not n.startswith(("swinv2", "swin_v2"))]  # V1 only
TV_NAMES = {"swin_t", "swin_s", "swin_b"}


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_registered_names():
    assert set(SWIN_NAMES) >= {"swin_tiny_patch4_window7_224", "swin_small_patch4_window7_224",
                               "swin_base_patch4_window7_224", "swin_base_patch4_window12_384",
                               "swin_large_patch4_window7_224", "swin_t", "swin_s", "swin_b"}


@pytest.mark.parametrize("name, count, peer", [
    ("swin_tiny_patch4_window7_224", 28_288_354, "timm"),
    ("swin_small_patch4_window7_224", 49_606_258, "timm"),
    ("swin_base_patch4_window7_224", 87_768_224, "timm"),
    ("swin_base_patch4_window12_384", None, "timm"),
    ("swin_large_patch4_window7_224", None, "timm"),
    ("swin_t", 28_288_354, "torchvision"),
    ("swin_s", 49_606_258, "torchvision"),
    ("swin_b", 87_768_224, "torchvision"),
])
def test_parameter_counts_equal_the_peers(name, count, peer):
    with torch.device("meta"):
        ours = vision_attn.create_model(name)
        theirs = timm.create_model(name) if peer == "timm" else torchvision.models.get_model(name, weights=None)
    assert n_params(ours) == n_params(theirs)
    if count is not None:
        assert n_params(ours) == count
    # the state dict holds parameters only: no index, mask or other buffers
    assert set(ours.state_dict()) == {k for k, _ in ours.named_parameters()}
    assert not list(ours.buffers())


def _small(name: str, **extra) -> SwinTransformer:
    """``name`` with its window and rule but one or two blocks a stage and narrow stages."""
    with torch.device("meta"):
        window = vision_attn.create_model(name).layers[0].blocks[0].window_size[0]
    img = 56 if window == 7 else 96  # stage sizes 14, 7, 4, 2 (window 7) or 24, 12, 6, 3 (window 12)
    return vision_attn.create_model(name, depths=(2, 1, 2, 1), embed_dim=16, num_heads=(1, 2, 2, 4),
                                    img_size=img, num_classes=7, **extra)


@pytest.mark.parametrize("name", SWIN_NAMES)
def test_small_variant_trains(name):
    model = _small(name, drop_path_rate=0.0).train()
    img = model.patch_embed.img_size
    assert isinstance(model.rule, TorchvisionWindows if name in TV_NAMES else TimmWindows)
    x = torch.randn(2, 3, img[0] + 8, img[1] - 4)  # not the configured size
    out = model(x)
    assert out.shape == (2, 7)
    out.square().sum().backward()
    for key, param in model.named_parameters():
        assert param.grad is not None, f"{key} got no gradient"
        assert torch.isfinite(param.grad).all(), f"{key} has a non-finite gradient"
        assert param.grad.abs().sum() > 0, f"{key} got an all-zero gradient"


def test_stochastic_depth_rises_linearly_over_blocks():
    with torch.device("meta"):
        model = vision_attn.create_model("swin_tiny_patch4_window7_224", drop_path_rate=0.3)
        tv = vision_attn.create_model("swin_t")
    rates = [getattr(b.drop_path1, "drop_prob", 0.0) for stage in model.layers for b in stage.blocks]
    assert len(rates) == 12
    torch.testing.assert_close(torch.tensor(rates), torch.linspace(0, 0.3, 12))
    assert tv.layers[3].blocks[1].drop_path1.drop_prob == pytest.approx(0.2)


@pytest.mark.parametrize("name", ["swin_tiny_patch4_window7_224", "swin_t"])
@pytest.mark.parametrize("size", [(112, 112), (320, 448), (250, 333), (224, 224)])
def test_any_input_size_runs(name, size):
    # two blocks a stage (plain and shifted windows everywhere), narrow: the window mechanics of the variant
    model = vision_attn.create_model(name, depths=(2, 2, 2, 2), embed_dim=32, num_heads=(1, 2, 4, 8)).eval()
    with torch.no_grad():
        out = model(torch.randn(1, 3, *size))
    assert out.shape == (1, 1000) and torch.isfinite(out).all()


@pytest.mark.parametrize("size, grids", [
    ((224, 224), [(56, 56), (28, 28), (14, 14), (7, 7)]),
    ((250, 333), [(63, 84), (32, 42), (16, 21), (8, 11)]),  # timm's rule pads the image to 252x336
])
def test_stage_feature_maps_at_strides_4_8_16_32(size, grids):
    model = vision_attn.create_model("swin_tiny_patch4_window7_224", depths=(1, 1, 2, 1)).eval()
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        maps = model.forward_intermediates(x, intermediates_only=True)
        last = model.forward_intermediates(x, indices=[-1], norm=True, intermediates_only=True)
    assert [tuple(m.shape) for m in maps] == [(1, c, *g) for c, g in zip((96, 192, 384, 768), grids)]
    assert [f["reduction"] for f in model.feature_info] == [4, 8, 16, 32]
    assert [f["num_chs"] for f in model.feature_info] == [96, 192, 384, 768]
    assert all(m.is_contiguous() for m in maps)
    assert len(last) == 1 and last[0].shape == maps[-1].shape


def test_forward_features_and_head():
    model = vision_attn.create_model("swin_tiny_patch4_window7_224", depths=(1, 1, 1, 1), embed_dim=32,
                                     num_heads=(1, 2, 4, 8), num_classes=5).eval()
    x = torch.randn(2, 3, 224, 160)
    with torch.no_grad():
        feats = model.forward_features(x)
        pooled = model.forward_head(feats, pre_logits=True)
        logits = model.forward_head(feats)
    assert feats.shape == (2, 7, 5, 256)  # NHWC
    assert pooled.shape == (2, 256) and logits.shape == (2, 5)
    torch.testing.assert_close(logits, model(x))
    model.reset_classifier(3)
    assert model(x).shape == (2, 3)
    assert model.get_classifier().out_features == 3
    assert all("relative_position_bias_table" in n for n in model.no_weight_decay())


def test_mask_cache_holds_one_entry_per_size_and_stays_out_of_the_state_dict():
    model = accelerate(vision_attn.create_model("swin_tiny_patch4_window7_224", depths=(2, 2, 2, 2), embed_dim=32,
                                                num_heads=(1, 2, 4, 8))).eval()
    keys = set(model.state_dict())
    with torch.no_grad():
        model(torch.randn(1, 3, 224, 224))
        model(torch.randn(1, 3, 224, 224))
    stage = model.layers[0]
    assert len(stage.windows) == 3  # two gather orders (plain, shifted) and one region mask
    assert all(b.windows is stage.windows for b in stage.blocks)
    with torch.no_grad():
        model(torch.randn(1, 3, 192, 256))
    assert len(stage.windows) == 6
    assert set(model.state_dict()) == keys


def test_trains_after_an_inference_mode_pass():
    """Masks and indices cached during an inference_mode pass must serve a later training step."""
    model = accelerate(vision_attn.create_model("swin_t", depths=(2, 2, 2, 2), embed_dim=16, num_heads=(1, 2, 2, 4)))
    x = torch.randn(1, 3, 64, 64)
    with torch.inference_mode():
        model.eval()(x)
    model.train()(x).sum().backward()
    assert model.layers[0].blocks[1].attn.relative_position_bias_table.grad is not None


# ------------------------------------------------------------------------------------------ FLOPs
@pytest.mark.parametrize("name, gmacs", [("swin_tiny_patch4_window7_224", 4.49), ("swin_small_patch4_window7_224", 8.74),
                                         ("swin_base_patch4_window7_224", 15.43), ("swin_t", 4.49)])
def test_published_gmacs(name, gmacs):
    report = count_model_flops(name)
    assert report.gmacs == pytest.approx(gmacs, rel=0.01)
    assert report.fused_attention_macs > 0


def test_flops_command(capsys):
    assert main(["flops", "swin_tiny_patch4_window7_224", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gmacs"] == pytest.approx(4.49, rel=0.01) and d["params"] == 28_288_354


def test_flops_equal_timm_count():
    from vision_attn.analysis import count_flops

    with torch.device("meta"):  # timm's Swin multiplies explicitly (no fused attention): counted as it is
        peer = timm.create_model("swin_tiny_patch4_window7_224").eval()
    assert count_flops(peer).macs == count_model_flops("swin_tiny_patch4_window7_224").macs


# ------------------------------------------------------------------------------------------ bad input
def test_image_smaller_than_a_patch():
    model = vision_attn.create_model("swin_tiny_patch4_window7_224", depths=(1, 1, 1, 1))
    with pytest.raises(DataError, match=r"image size 3x40 is smaller than one 4x4 patch"):
        model(torch.randn(1, 3, 3, 40))


def test_wrong_channel_count():
    model = vision_attn.create_model("swin_t", depths=(1, 1, 1, 1))
    with pytest.raises(DataError, match="in_chans=1"):
        model(torch.randn(1, 1, 64, 64))


@pytest.mark.parametrize("kwargs, match", [
    (dict(img_size=256), r"window_size \(7, 7\) does not divide the configured resolution 64x64 of stage 0"),
    (dict(img_size=224, window_size=12), r"does not divide the configured resolution 56x56"),
    (dict(window_rule="keras"), "window_rule='keras'"),
    (dict(depths=(2, 2), num_heads=(3, 6, 12)), "one entry per stage"),
])
def test_bad_configuration(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        vision_attn.create_model("swin_tiny_patch4_window7_224", **kwargs)


def test_small_configured_size_shrinks_windows_like_timm():
    with torch.device("meta"):
        ours = vision_attn.create_model("swin_tiny_patch4_window7_224", img_size=112)
        peer = timm.create_model("swin_tiny_patch4_window7_224", img_size=112)
    assert ours.layers[3].blocks[0].window_size == (4, 4)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in peer.state_dict().items()}


def test_checkpoint_of_another_depth(tmp_path):
    small = dict(embed_dim=16, num_heads=(1, 2, 2, 4), img_size=56)
    path = tmp_path / "deeper.pth"
    torch.save(vision_attn.create_model("swin_tiny_patch4_window7_224", depths=(2, 2, 6, 2), **small).state_dict(), path)
    with pytest.raises(CheckpointError, match=r"not in the model: layers\.2\.blocks\.4\.") as info:
        vision_attn.create_model("swin_tiny_patch4_window7_224", depths=(2, 2, 4, 2), pretrained=path, **small)
    assert str(path) in str(info.value)
    with pytest.raises(CheckpointError, match=r"missing from the file: layers\.2\.blocks\.6\."):
        vision_attn.create_model("swin_tiny_patch4_window7_224", depths=(2, 2, 8, 2), pretrained=path, **small)


def test_checkpoint_of_another_width(tmp_path):
    path = tmp_path / "wide.pth"
    torch.save(vision_attn.create_model("swin_tiny_patch4_window7_224", depths=(1, 1, 1, 1)).state_dict(), path)
    with pytest.raises(CheckpointError, match="shape mismatch"):
        vision_attn.create_model("swin_tiny_patch4_window7_224", depths=(1, 1, 1, 1), embed_dim=64,
                                 num_heads=(2, 4, 8, 16), pretrained=path)


def test_foreign_keys_are_named(tmp_path):
    path = tmp_path / "ape.pth"
    state = vision_attn.create_model("swin_tiny_patch4_window7_224", depths=(1, 1, 1, 1)).state_dict()
    state = {k.replace("head.fc.", "head."): v for k, v in state.items()}  # official layout
    state["absolute_pos_embed"] = torch.zeros(1, 3136, 96)
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="absolute_pos_embed"):
        vision_attn.create_model("swin_tiny_patch4_window7_224", depths=(1, 1, 1, 1), pretrained=path)


def test_a_patch_size_given_as_a_pair_gives_timms_reductions_and_pool_size():
    """A transformers config states pairs (patch_size [4, 4]): feature_info's reductions stay numbers."""
    with torch.device("meta"):
        model = vision_attn.create_model("swin_tiny_patch4_window7_224", patch_size=(4, 4))
    assert [f["reduction"] for f in model.feature_info] == [4, 8, 16, 32]
    assert model.pretrained_cfg["pool_size"] == (7, 7)
