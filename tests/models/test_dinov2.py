"""DINOv2 backbones against timm: parameter counts of the eight names, the same outputs from timm's
files and from official hub-layout files (made here from timm's), any multiple of 14 resampled as
timm's dynamic_img_size does, feature maps for detector necks, the mask token."""
from __future__ import annotations

import json

import pytest
import timm
import torch

import vision_attn
from vision_attn.layers import SwiGLU
from vision_attn.models.yolo.backbone import Backbone

ATOL = 1e-4
NAMES = ["vit_small_patch14_dinov2", "vit_base_patch14_dinov2", "vit_large_patch14_dinov2", "vit_giant_patch14_dinov2",
         "vit_small_patch14_reg4_dinov2", "vit_base_patch14_reg4_dinov2", "vit_large_patch14_reg4_dinov2",
         "vit_giant_patch14_reg4_dinov2"]
SHALLOW = {"vit_small_patch14_dinov2": dict(depth=2), "vit_small_patch14_reg4_dinov2": dict(depth=2),
           "vit_giant_patch14_dinov2": dict(depth=1, embed_dim=192, num_heads=3),  # SwiGLU, narrowed
           "vit_giant_patch14_reg4_dinov2": dict(depth=1, embed_dim=192, num_heads=3)}


def assert_close(a: torch.Tensor, b: torch.Tensor, atol: float = ATOL) -> None:
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = (a - b).abs().max().item()
    assert diff <= atol, f"max abs diff {diff:.3g} > {atol}"


def randomise(model: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=0.02 if p.ndim > 1 else 0.1)
    return model


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def timm_peer(name: str, img: int = 98) -> torch.nn.Module:
    torch.manual_seed(7)
    return randomise(timm.create_model(name, img_size=img, dynamic_img_size=True, **SHALLOW[name])).eval()


@pytest.mark.parametrize("name", NAMES)
def test_parameter_counts_equal_timm(name):
    with torch.device("meta"):  # ViT-g has 1.1 B parameters: nothing allocated
        ours, peer = vision_attn.create_model(name), timm.create_model(name)
    assert n_params(ours) == n_params(peer)
    assert ours.patch_embed.img_size == (518, 518) and ours.pos_embed.shape == peer.pos_embed.shape
    assert ours.num_classes == 0 and ours.mask_token is None  # timm's defaults: a backbone, no mask token


def test_giant_has_a_swiglu_of_timms_widths():
    with torch.device("meta"):
        mlp = vision_attn.create_model("vit_giant_patch14_dinov2").blocks[0].mlp
    assert isinstance(mlp, SwiGLU) and isinstance(mlp.act, torch.nn.SiLU)
    assert tuple(mlp.fc1.weight.shape) == (8192, 1536) and tuple(mlp.fc2.weight.shape) == (1536, 4096)


@pytest.mark.parametrize("name", list(SHALLOW))
def test_timm_weights_same_outputs_at_any_multiple_of_14(tmp_path, name):
    peer = timm_peer(name)
    torch.save(peer.state_dict(), tmp_path / "timm.pth")
    ours = vision_attn.create_model(name, img_size=98, pretrained=tmp_path / "timm.pth", **SHALLOW[name]).eval()
    for size in [(98, 98), (70, 126), (154, 154)]:  # the configured grid, a smaller and a larger one
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            assert_close(ours(x), peer(x))


# Our (timm's) layout -> the official DINOv2 hub layout (dinov2/models/vision_transformer.py), written
# here independently of vision_attn.models.vit.dinov2_to_timm:
#   reg_token -> register_tokens; timm's register models keep no position row for the class token,
#     the official ones do: pos_embed gains a (random) row p0 and cls_token becomes cls_token - p0
#   blocks.{i}.mlp.fc1 / fc2 of a SwiGLU -> blocks.{i}.mlp.w12 / w3
#   a trained mask_token (1, D) is added
def to_official(state: dict, swiglu: bool) -> dict:
    out = {}
    for key, value in state.items():
        if swiglu and ".mlp.fc" in key:
            key = key.replace(".mlp.fc1.", ".mlp.w12.").replace(".mlp.fc2.", ".mlp.w3.")
        out["register_tokens" if key == "reg_token" else key] = value
    dim = state["cls_token"].shape[-1]
    if "reg_token" in state:
        p0 = torch.randn(1, 1, dim)
        out["pos_embed"] = torch.cat([p0, state["pos_embed"]], dim=1)
        out["cls_token"] = state["cls_token"] - p0
    out["mask_token"] = torch.randn(1, dim)
    return out


@pytest.mark.parametrize("name", list(SHALLOW))
def test_official_layout_loads_strictly_with_the_same_outputs(tmp_path, name):
    peer = timm_peer(name)
    official = to_official(peer.state_dict(), swiglu="giant" in name)
    assert "mask_token" in official and ("register_tokens" in official) == ("reg4" in name)
    torch.save(official, tmp_path / "dinov2_pretrain.pth")
    x = torch.randn(1, 3, 112, 84)
    with torch.no_grad():
        want = peer(x)
    kept = vision_attn.create_model(name, img_size=98, mask_token=True, pretrained=tmp_path / "dinov2_pretrain.pth",
                                    **SHALLOW[name]).eval()
    assert torch.equal(kept.mask_token, official["mask_token"])  # every key of the file is in the model
    dropped = vision_attn.create_model(name, img_size=98, pretrained=tmp_path / "dinov2_pretrain.pth",
                                       **SHALLOW[name]).eval()  # timm's choice: the mask token is left out
    with torch.no_grad():
        assert_close(kept(x), want)
        assert_close(dropped(x), want)


def test_518_file_into_a_224_model_resamples_like_timm(tmp_path):
    torch.manual_seed(8)
    src = randomise(timm.create_model("vit_small_patch14_reg4_dinov2", depth=1))  # 37x37 position table
    torch.save(src.state_dict(), tmp_path / "518.pth")
    ours = vision_attn.create_model("vit_small_patch14_reg4_dinov2", img_size=224, depth=1, pretrained=tmp_path / "518.pth")
    peer = timm.create_model("vit_small_patch14_reg4_dinov2", img_size=224, depth=1, pretrained=True,
                             pretrained_cfg_overlay=dict(file=str(tmp_path / "518.pth")))
    assert ours.pos_embed.shape == (1, 16 * 16, 384)
    assert_close(ours.pos_embed, peer.pos_embed, atol=1e-5)


def test_mask_token_replaces_the_masked_patches():
    torch.manual_seed(9)
    model = randomise(vision_attn.create_model("vit_small_patch14_dinov2", img_size=56, depth=1, mask_token=True)).eval()
    x = torch.randn(2, 3, 56, 56)
    masks = torch.zeros(2, 16, dtype=torch.bool)
    masks[0, 3] = True
    with torch.no_grad():
        plain, masked = model.forward_features(x), model.forward_features(x, masks=masks)
    assert_close(masked[1], plain[1])  # nothing masked in the second image
    assert (masked[0] - plain[0]).abs().max() > 1e-3
    model.train()
    model.forward_features(x, masks=masks).sum().backward()
    assert model.mask_token.grad.abs().sum() > 0
    with pytest.raises(vision_attn.DataError, match="expected \\(2, 16\\)"):
        model.forward_features(x, masks=masks[:, :8])
    with pytest.raises(vision_attn.ConfigError, match="mask_token=True"):
        vision_attn.create_model("vit_small_patch14_dinov2", img_size=56, depth=1).forward_features(x, masks=masks)


def test_our_own_register_model_with_a_mask_token_reloads(tmp_path):
    """Its file carries mask_token (as official DINOv2 files do) but our keys: its class token's position
    is folded already and must not be folded twice."""
    model = randomise(vision_attn.create_model("vit_small_patch14_reg4_dinov2", img_size=56, depth=1,
                                               mask_token=True)).eval()
    torch.save(model.state_dict(), tmp_path / "ours.pth")
    again = vision_attn.create_model("vit_small_patch14_reg4_dinov2", img_size=56, depth=1, mask_token=True,
                                     pretrained=tmp_path / "ours.pth").eval()
    x = torch.randn(1, 3, 56, 56)
    with torch.no_grad():
        assert torch.equal(again(x), model(x))


@pytest.mark.parametrize("name", ["vit_small_patch14_dinov2", "vit_small_patch14_reg4_dinov2"])
def test_forward_intermediates_like_timm(tmp_path, name):
    peer = timm_peer(name)
    torch.save(peer.state_dict(), tmp_path / "timm.pth")
    ours = vision_attn.create_model(name, img_size=98, pretrained=tmp_path / "timm.pth", **SHALLOW[name]).eval()
    x = torch.randn(1, 3, 70, 126)
    with torch.no_grad():
        got = ours.forward_intermediates(x, indices=[0, 1], norm=True, intermediates_only=True)
        want = peer.forward_intermediates(x, indices=[0, 1], norm=True, intermediates_only=True)
    assert [tuple(g.shape) for g in got] == [(1, 384, 5, 9)] * 2
    for g, w in zip(got, want):
        assert_close(g, w)


def test_backbone_row_gives_the_token_maps():
    """A YAML ``Backbone`` row over DINOv2: maps after the chosen blocks, registers dropped."""
    torch.manual_seed(10)
    backbone = Backbone("vit_small_patch14_reg4_dinov2", {"indices": [0, 1], "img_size": 224}).eval()
    backbone.net.model.blocks = backbone.net.model.blocks[:2]  # keep the test small: the first two blocks are what it takes
    assert backbone.channels == [384, 384] and backbone.strides == [14, 14]
    x = torch.rand(1, 3, 224, 168)
    with torch.no_grad():
        maps = backbone(x)
        tokens = backbone.net.model.blocks[1](backbone.net.model.blocks[0](backbone.net.model._embed(x)[0]))
    assert [tuple(m.shape) for m in maps] == [(1, 384, 16, 12)] * 2
    assert_close(maps[1].flatten(2).transpose(1, 2), tokens[:, 5:])  # class token and 4 registers dropped


def test_flops_and_benchmark_commands_know_dinov2(capsys):
    from vision_attn.cli import main

    assert main(["flops", "vit_small_patch14_dinov2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["params"] == 22_056_192 and d["input_shape"] == [1, 3, 518, 518]
    argv = ["benchmark", "vit_small_patch14_reg4_dinov2", "--img-size", "28", "--vs", "timm", "--rounds", "1",
            "--iters", "1", "--warmup", "1", "--json", "--device", "cpu"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    assert [r["model"] for r in rows] == ["vit_small_patch14_reg4_dinov2", "timm vit_small_patch14_reg4_dinov2"]
    assert rows[0]["flops_per_call"] == rows[1]["flops_per_call"] > 0 and rows[0]["ratio"] > 0
