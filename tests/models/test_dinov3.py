"""DINOv3 ViTs under timm's names against timm's Eva: the same keys and parameter counts for every
variant (meta device), timm's random file loaded with timm's outputs (pooled features, logits,
intermediates) at the file's size and another, in eval mode; in training, with the coordinate
augmentation set, the same draws give the same outputs."""
from __future__ import annotations

import pytest
import safetensors.torch
from PIL import Image
import timm
import torch

import vision_attn
from vision_attn.cli import main

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


def _official(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """timm's keys -> the official DINOv3 layout (facebookresearch/dinov3's files), written from the
    layout's description: storage tokens, ls1/ls2, SwiGLU w1/w2/w3, one qkv bias with its key third
    masked by bias_mask (a non-zero key bias stored, as training leaves it), the rope periods."""
    out: dict[str, torch.Tensor] = {}
    for k, v in state.items():
        k = k.replace("reg_token", "storage_tokens").replace("gamma_1", "ls1.gamma").replace("gamma_2", "ls2.gamma")
        if any(".mlp.fc1_g." in key for key in state):  # SwiGLU: w1 gate, w2 value, w3 out
            k = k.replace("mlp.fc1_g", "mlp.w1").replace("mlp.fc1_x", "mlp.w2").replace("mlp.fc2", "mlp.w3")
        if k.endswith("attn.q_bias"):
            v_bias = state[k.replace("q_bias", "v_bias")]
            out[k.replace("q_bias", "qkv.bias")] = torch.cat([v, torch.full_like(v, 0.5), v_bias])
            out[k.replace("q_bias", "qkv.bias_mask")] = torch.cat([torch.ones_like(v), torch.zeros_like(v),
                                                                   torch.ones_like(v)])
            continue
        if k.endswith("attn.v_bias"):
            continue
        out[k] = v
    out["mask_token"] = torch.zeros(1, state["cls_token"].shape[-1])
    out["rope_embed.periods"] = torch.ones(state["cls_token"].shape[-1] // 3 // 4)
    return out


def test_official_dinov3_file_loads_as_timm_loads_it(tmp_path):
    name = "vit_small_plus_patch16_dinov3_qkvb"  # SwiGLU w1/w2/w3 and the masked qkv bias
    peer = randomise(timm.create_model(name, pretrained=False, **SMALL))
    official = _official(peer.state_dict())
    assert "blocks.1.mlp.w3.weight" in official and "blocks.0.attn.qkv.bias_mask" in official
    path = tmp_path / "dinov3_vits16plus_pretrain.pth"
    torch.save(official, path)
    theirs = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **SMALL).eval()
    ours = vision_attn.create_model(name, pretrained=path, **SMALL).eval()
    x = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-4, rtol=0)


def test_official_file_with_an_option_vision_attn_lacks_is_refused_in_one_line(tmp_path, capsys):
    name = "vit_small_patch16_dinov3"
    official = _official(timm.create_model(name, pretrained=False, **SMALL).state_dict())
    official["cls_norm.weight"], official["cls_norm.bias"] = torch.ones(48), torch.zeros(48)
    path = tmp_path / "dinov3_untied.pth"
    torch.save(official, path)
    with pytest.raises(vision_attn.CheckpointError) as info:
        vision_attn.create_model(name, pretrained=path, **SMALL)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)) and "untie_cls_and_patch_norms" in message
    out, image = tmp_path / "maps.png", tmp_path / "image.png"
    Image.new("RGB", (32, 32)).save(image)
    # the CLI builds the name at full size: the smallest DINOv3 (the file's extra norm is refused before any shape)
    assert main(["attn-map", "--model", "vit_tiny_patch16_dinov3_qkvb", "--weights", str(path), "--image", str(image),
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: ") and "cls_norm" in err and not out.exists()
