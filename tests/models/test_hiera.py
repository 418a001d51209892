"""Hiera and SAM 2's Hiera encoders under timm's names against timm (keys, parameter counts and input
configurations of every variant on the meta device; timm's random files loaded with timm's logits and
intermediates), transformers' ``hiera`` folders against ``HieraModel`` / ``HieraForImageClassification``,
and the variants vision_attn does not build refused in one line."""
from __future__ import annotations

import pytest
import timm
import torch
import transformers
from PIL import Image

import vision_attn
from vision_attn.cli import main
from vision_attn.errors import CheckpointError, DataError
from vision_attn.models.hiera import Hiera
from vision_attn.tasks.optim import layer_ids

from .peer_weights import assert_built_like_timm, randomise

NAMES = vision_attn.list_models("hiera*") + vision_attn.list_models("sam2_hiera*")
SMALL = dict(embed_dim=16, stages=(1, 1, 2, 1), num_classes=5)
SAM2_SMALL = dict(SMALL, window_spec=(8, 4, 2, 2), global_att_blocks=(3,))  # a pooling block may not be global in timm
TOL = dict(atol=1e-4, rtol=0)


def test_the_names_are_timms():
    assert NAMES == sorted(timm.list_models("hiera*") + timm.list_models("sam2_hiera*"))


@pytest.mark.parametrize("name", NAMES)
def test_keys_parameter_counts_and_configuration_are_timms(name):
    assert_built_like_timm(name)


def _like_timm(ours: torch.nn.Module, peer: torch.nn.Module, size: tuple[int, int]) -> None:
    x = torch.randn(2, 3, *size)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), peer(x), **TOL)
        final, maps = ours.forward_intermediates(x)
        peer_final, peer_maps = peer.forward_intermediates(x)
    torch.testing.assert_close(final, peer_final, **TOL)
    assert [m.shape[-2:] for m in maps] == [(size[0] // r, size[1] // r) for r in (4, 8, 16, 32)]
    for a, b in zip(maps, peer_maps, strict=True):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("size", [(224, 224), (64, 96)])  # the name's size, and a non-square one it is built for
def test_hiera_timm_file_same_outputs(tmp_path, size):
    """A plain Hiera's table has a row per token: a file runs at the size it was built for, as in timm."""
    peer = randomise(timm.create_model("hiera_tiny_224", pretrained=False, img_size=size, **SMALL))
    torch.save(peer.state_dict(), tmp_path / "hiera.pth")
    ours = vision_attn.create_model("hiera_tiny_224", pretrained=tmp_path / "hiera.pth", img_size=size, **SMALL).eval()
    _like_timm(ours, peer, size)
    with pytest.raises(DataError, match=r"img_size=\(32, 32\)"):
        ours(torch.randn(1, 3, 32, 32))


def test_abswin_timm_file_same_outputs_at_two_sizes(tmp_path):
    """abswin's tables do not depend on the size: timm builds the same file at another size."""
    peer = randomise(timm.create_model("hiera_small_abswin_256", pretrained=False, img_size=64, **SMALL))
    torch.save(peer.state_dict(), tmp_path / "hiera.pth")
    for size in [(64, 64), (96, 64)]:
        theirs = timm.create_model("hiera_small_abswin_256", pretrained=False, img_size=size, **SMALL).eval()
        theirs.load_state_dict(torch.load(tmp_path / "hiera.pth"))
        ours = vision_attn.create_model("hiera_small_abswin_256", pretrained=tmp_path / "hiera.pth", img_size=size,
                                        **SMALL).eval()
        _like_timm(ours, theirs, size)


def test_sam2_timm_file_same_outputs_at_two_sizes(tmp_path):
    peer = randomise(timm.create_model("sam2_hiera_tiny", pretrained=False, **SAM2_SMALL))
    torch.save(peer.state_dict(), tmp_path / "sam2.pth")
    ours = vision_attn.create_model("sam2_hiera_tiny", pretrained=tmp_path / "sam2.pth", **SAM2_SMALL).eval()
    for size in [(64, 64), (96, 128)]:  # 96x128: the windows of 2 pad the 3x4 map of stage 3
        _like_timm(ours, peer, size)
    # the name's own stages, windows (8, 4, 14, 7) and global blocks, narrow, at 224 (timm's min_input_size)
    peer = randomise(timm.create_model("sam2_hiera_tiny", pretrained=False, embed_dim=16, num_classes=5))
    torch.save(peer.state_dict(), tmp_path / "sam2_t.pth")
    ours = vision_attn.create_model("sam2_hiera_tiny", pretrained=tmp_path / "sam2_t.pth", embed_dim=16, num_classes=5)
    _like_timm(ours.eval(), peer, (224, 224))
    features = vision_attn.create_model("sam2_hiera_tiny", features_only=True, **{**SAM2_SMALL, "num_classes": 0})
    assert features.feature_info.reduction() == [4, 8, 16, 32] and features.feature_info.channels() == [16, 32, 64, 128]


def _hf_folder(path, cls, image_size=(64, 96), **config):
    randomise(cls(transformers.HieraConfig(embed_dim=16, depths=[1, 1, 2, 1], image_size=list(image_size), **config)))\
        .save_pretrained(str(path))
    return cls.from_pretrained(str(path)).eval()


def test_transformers_folders_give_the_peers_outputs(tmp_path):
    peer = _hf_folder(tmp_path / "cls", transformers.HieraForImageClassification, num_labels=5)
    ours = vision_attn.create_model(pretrained=tmp_path / "cls").eval()
    assert isinstance(ours, Hiera) and ours.pretrained_cfg["architecture"] == "hiera_tiny_224"
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in peer.parameters())
    x = torch.randn(2, 3, 64, 96)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), peer(pixel_values=x).logits, **TOL)
    peer = _hf_folder(tmp_path / "base", transformers.HieraModel, image_size=(64, 64))  # square: transformers resizes
    for size in [(64, 64), (96, 128)]:  # its size, and another (transformers with interpolate_pos_encoding)
        ours = vision_attn.create_model(pretrained=tmp_path / "base", img_size=size).eval()
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            want = peer(pixel_values=x, interpolate_pos_encoding=True)
            torch.testing.assert_close(ours(x), want.pooler_output, **TOL)
            torch.testing.assert_close(ours.forward_features(x), want.last_hidden_state, atol=1e-4, rtol=1e-5)


def test_a_folder_of_a_variant_not_built_is_refused_in_one_line(tmp_path, capsys):
    _hf_folder(tmp_path / "hf", transformers.HieraModel, num_heads=[1, 2, 2, 4])
    config = tmp_path / "hf" / "config.json"
    with pytest.raises(CheckpointError) as info:
        vision_attn.create_model(pretrained=tmp_path / "hf")
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(config)) and "num_heads=[1, 2, 2, 4]" in message
    out, image = tmp_path / "maps.png", tmp_path / "image.png"
    Image.new("RGB", (32, 32)).save(image)
    assert main(["attn-map", "--model", "hiera_tiny_224", "--weights", str(tmp_path / "hf"), "--image", str(image),
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {config}: ") and "num_heads" in err and not out.exists()


def test_a_video_hiera_file_is_refused_naming_the_option(tmp_path):
    state = randomise(timm.create_model("hiera_tiny_224", pretrained=False, img_size=(64, 96), **SMALL)).state_dict()
    state["pos_embed_spatial"], state["pos_embed_temporal"] = state.pop("pos_embed"), torch.zeros(1, 8, 16)
    torch.save(state, tmp_path / "hiera_video.pth")
    with pytest.raises(CheckpointError) as info:
        vision_attn.create_model("hiera_tiny_224", pretrained=tmp_path / "hiera_video.pth", img_size=(64, 96), **SMALL)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(tmp_path / "hiera_video.pth")) and "sep_pos_embed" in message


@pytest.mark.parametrize("name", ["hiera_small_abswin_256", "sam2_hiera_small"])
def test_layer_decay_counts_the_blocks_and_puts_the_position_tables_in_the_stem(name):
    with torch.device("meta"):
        model = vision_attn.create_model(name)
    ids, layers = layer_ids(model)
    table = "pos_embed_win" if name.startswith("hiera") else "pos_embed_window"
    assert layers == len(model.blocks) == 16 and ids(table) == ids("pos_embed") == ids("patch_embed.proj.weight") == 0
    assert ids("blocks.0.attn.qkv.weight") == 1 and ids("blocks.15.mlp.fc2.bias") == 16 and ids("head.norm.weight") == 17
