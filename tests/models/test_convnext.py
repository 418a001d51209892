"""ConvNeXt under timm's names against timm's ConvNeXt (keys, parameter counts and input configurations
of every variant on the meta device; timm's random files loaded with timm's logits, features and
intermediates at two sizes), the official layout (DINOv3's and facebookresearch's files), and
transformers' DINOv3 ConvNeXt folders against ``DINOv3ConvNextModel``."""
from __future__ import annotations

import pytest
import timm
import torch
import transformers
from safetensors.torch import load_file, save_file

import vision_attn
from vision_attn.models.convert import to_timm
from vision_attn.models.convnext import ConvNeXt

from .peer_weights import assert_built_like_timm, randomise

NAMES = vision_attn.list_models("convnext*")
SMALL = dict(depths=(1, 1, 2, 1), dims=(16, 24, 32, 40), num_classes=5)
TOL = dict(atol=1e-4, rtol=0)


def test_the_names_are_timms_atto_to_large():
    assert NAMES == sorted(f"convnext_{s}" for s in ("atto", "femto", "pico", "nano", "tiny", "small", "base", "large"))


@pytest.mark.parametrize("name", NAMES)
def test_keys_parameter_counts_and_configuration_are_timms(name):
    assert_built_like_timm(name)


@pytest.mark.parametrize("name", ["convnext_atto", "convnext_tiny"])  # 1x1-conv MLP, linear MLP
def test_timm_file_same_outputs_at_two_sizes(tmp_path, name):
    peer = randomise(timm.create_model(name, pretrained=False, **SMALL)).eval()
    torch.save(peer.state_dict(), tmp_path / "convnext.pth")
    ours = vision_attn.create_model(name, pretrained=tmp_path / "convnext.pth", **SMALL).eval()
    for size in [(64, 64), (96, 64)]:
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            torch.testing.assert_close(ours(x), peer(x), **TOL)
            torch.testing.assert_close(ours.forward_head(ours.forward_features(x), pre_logits=True),
                                       peer.forward_head(peer.forward_features(x), pre_logits=True), **TOL)
            final, maps = ours.forward_intermediates(x)
            peer_final, peer_maps = peer.forward_intermediates(x)
        torch.testing.assert_close(final, peer_final, **TOL)
        assert [m.shape[-1] for m in maps] == [size[1] // r for r in (4, 8, 16, 32)]
        for a, b in zip(maps, peer_maps, strict=True):
            torch.testing.assert_close(a, b, **TOL)


def _official(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """timm's keys -> the official layout (the inverse of timm's own checkpoint_filter_fn), written here
    from the layout's description: what DINOv3's convnext_*.pth files hold."""
    out = {}
    for k, v in state.items():
        k = k.replace("stem.", "downsample_layers.0.").replace(".conv_dw.", ".dwconv.").replace(".mlp.fc", ".pwconv")
        parts = k.split(".")
        if parts[0] == "stages" and parts[2] == "downsample":
            k = ".".join(["downsample_layers", parts[1], *parts[3:]])
        elif parts[0] == "stages":
            k = ".".join(["stages", parts[1], *parts[3:]])
        k = k.replace("head.norm.", "norm.").replace("head.fc.", "head.")
        out[k] = v
    return out


def test_official_layout_loads_as_timm_maps_it(tmp_path):
    peer = randomise(timm.create_model("convnext_tiny", pretrained=False, **SMALL)).eval()
    official = _official(peer.state_dict())
    assert "downsample_layers.1.1.weight" in official and "stages.2.1.pwconv1.weight" in official
    torch.save(official, tmp_path / "dinov3_convnext_tiny.pth")
    theirs = timm.create_model("convnext_tiny", pretrained=True, **SMALL,
                               pretrained_cfg_overlay=dict(file=str(tmp_path / "dinov3_convnext_tiny.pth"),
                                                                 num_classes=5)).eval()
    ours = vision_attn.create_model("convnext_tiny", pretrained=tmp_path / "dinov3_convnext_tiny.pth", **SMALL).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), **TOL)
        torch.testing.assert_close(ours(x), peer(x), **TOL)


def test_transformers_folder_gives_the_peers_outputs_at_its_size_and_another(tmp_path):
    config = transformers.DINOv3ConvNextConfig(hidden_sizes=[16, 24, 32, 40], depths=[1, 1, 2, 1], image_size=64,
                                               layer_norm_eps=1e-5)
    randomise(transformers.DINOv3ConvNextModel(config)).save_pretrained(str(tmp_path / "hf"))
    peer = transformers.DINOv3ConvNextModel.from_pretrained(str(tmp_path / "hf")).eval()
    legacy = tmp_path / "v4"  # transformers 4.x keys (stages.*, as the Hub's facebook/dinov3-convnext-* files)
    legacy.mkdir()
    (legacy / "config.json").write_text((tmp_path / "hf" / "config.json").read_text())
    save_file({k.removeprefix("model."): v for k, v in load_file(str(tmp_path / "hf" / "model.safetensors")).items()},
              str(legacy / "model.safetensors"), metadata={"format": "pt"})
    for source in (tmp_path / "hf", legacy):
        ours = vision_attn.create_model(pretrained=source).eval()
        assert isinstance(ours, ConvNeXt) and ours.pretrained_cfg["architecture"] == "convnext_tiny"
        assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in peer.parameters())
        for size in [(64, 64), (96, 64)]:
            x = torch.randn(2, 3, *size)
            with torch.no_grad():
                want = peer(pixel_values=x)
                torch.testing.assert_close(ours(x), want.pooler_output, **TOL)
                tokens = want.last_hidden_state[:, 1:]  # the last map's positions, normalised
                got = ours.head.norm(ours.forward_features(x)).flatten(2).transpose(1, 2)
                torch.testing.assert_close(got, tokens, **TOL)


def test_fine_tuning_a_timm_file_replaces_the_head(tmp_path):
    peer = randomise(timm.create_model("convnext_atto", pretrained=False, **{**SMALL, "num_classes": 0}))
    torch.save(peer.state_dict(), tmp_path / "backbone.pth")
    with pytest.warns(UserWarning, match="re-initialised"):  # a file without a classifier: a fresh 3-class head
        model = vision_attn.create_model("convnext_atto", pretrained=tmp_path / "backbone.pth", **{**SMALL, "num_classes": 3})
    x = torch.randn(2, 3, 64, 64)
    assert model(x).shape == (2, 3)
    with torch.no_grad():
        torch.testing.assert_close(model.forward_head(model.forward_features(x), pre_logits=True), peer.eval()(x), **TOL)



def test_convert_to_timm_loads_in_timms_convnext(tmp_path):
    """`vision-attn convert --to timm` of a ConvNeXt: timm's model (which takes no image size) loads the
    file strictly and gives our logits."""
    model = vision_attn.create_model("convnext_atto", img_size=64, **SMALL).eval()
    done = to_timm(model, "convnext_atto", tmp_path / "timm.safetensors", kwargs=SMALL, img_size=(64, 64))
    assert done.max_diff < 1e-4 and "img_size" not in done.load
