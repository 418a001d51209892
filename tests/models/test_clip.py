"""CLIP and SigLIP image towers against timm (their names, configurations and weights) and open_clip
(OpenAI CLIP's layout): peer weights in, the same outputs out (float32, eval)."""
from __future__ import annotations

import open_clip
import pytest
import timm
import torch
from timm.layers import QuickGELU as TimmQuickGELU

import vision_attn
from vision_attn.analysis.flops import count_flops
from vision_attn.errors import CheckpointError
from vision_attn.layers import QuickGELU

NAMES = ["vit_base_patch32_clip_224", "vit_base_patch16_clip_224", "vit_large_patch14_clip_224",
         "vit_base_patch32_clip_quickgelu_224", "vit_base_patch16_clip_quickgelu_224",
         "vit_large_patch14_clip_quickgelu_224", "vit_base_patch16_siglip_224", "vit_base_patch16_siglip_256",
         "vit_base_patch16_siglip_gap_224"]
CFG_FIELDS = ("input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std", "num_classes", "first_conv")
SMALL = dict(depth=2, embed_dim=64, num_heads=4, img_size=64, num_classes=7)  # a 4x4 grid of 16 px patches


def assert_close(a: torch.Tensor, b: torch.Tensor, atol: float) -> None:
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = (a - b).abs().max().item()
    assert diff <= atol, f"max abs diff {diff:.3g} > {atol}"


def randomise(model: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial values everywhere (zero-initialised tokens, biases, norms and heads included), so
    that a weight that fails to load shows in the outputs."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=0.02 if p.ndim > 1 else 0.1)
    return model


@pytest.mark.parametrize("name", NAMES)
def test_architecture_and_input_configuration_are_timms(name):
    with torch.device("meta"):  # no memory, no init: ViT-L builds in milliseconds
        ours, theirs = vision_attn.create_model(name), timm.create_model(name, pretrained=False)
    assert [(k, v.shape) for k, v in ours.state_dict().items()] == [(k, v.shape) for k, v in theirs.state_dict().items()]
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    assert (ours.num_classes, ours.num_features, ours.num_prefix_tokens) == \
           (theirs.num_classes, theirs.num_features, theirs.num_prefix_tokens)
    for field in CFG_FIELDS:
        assert ours.pretrained_cfg[field] == theirs.pretrained_cfg[field], field


@pytest.mark.parametrize("name", ["vit_base_patch32_clip_224", "vit_base_patch16_clip_quickgelu_224",
                                  "vit_base_patch16_siglip_224"])
def test_timm_weights_same_outputs_at_two_sizes(tmp_path, name):
    """Pre-norm, bias-free patch projection, quick GELU and the attention pool: timm's random file
    loads strictly and gives timm's features, pooled features and logits."""
    kwargs = {**SMALL, "patch_size": 16}
    peer = randomise(timm.create_model(name, pretrained=False, dynamic_img_size=True, **kwargs)).eval()
    path = tmp_path / "timm.pth"
    torch.save(peer.state_dict(), path)
    ours = vision_attn.create_model(name, pretrained=path, **kwargs).eval()
    ours.load_state_dict(peer.state_dict(), strict=True)  # the same keys, nothing converted
    for size in [(64, 64), (48, 80)]:  # the file's grid, and one resampled at run time (as timm's dynamic size)
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            feats, peer_feats = ours.forward_features(x), peer.forward_features(x)
            n_tokens = ours.num_prefix_tokens + size[0] // 16 * size[1] // 16
            assert feats.shape == (2, n_tokens, 64)
            assert_close(feats, peer_feats, 1e-5)
            pooled = ours.forward_head(feats, pre_logits=True)
            assert pooled.shape == (2, 64)
            assert_close(pooled, peer.forward_head(peer_feats, pre_logits=True), 1e-5)
            assert_close(ours(x), peer(x), 1e-5)


def test_attention_pool_flops_on_meta():
    """The FLOP counter runs the SigLIP head on the meta device under no_grad (torch's module tracker
    needs every module input to have a gradient function), with the head's own MACs: one query of
    width D over the 4x4 grid, D = 64, MLP 256 wide."""
    with torch.device("meta"):
        model = vision_attn.create_model("vit_base_patch16_siglip_224", **{**SMALL, "patch_size": 16})
    macs = count_flops(model).by_module
    D, N = 64, 16
    assert macs["attn_pool.q"] == D * D and macs["attn_pool.kv"] == N * D * 2 * D
    assert macs["attn_pool"] == 2 * N * D  # q k^T and the weighted sum of v, one query
    assert macs["attn_pool.proj"] == D * D and macs["attn_pool.mlp"] == 2 * D * 4 * D


def test_quick_gelu_is_timms_and_not_gelu():
    x = torch.linspace(-6, 6, 101)
    assert_close(QuickGELU()(x), TimmQuickGELU()(x), 1e-7)
    assert (QuickGELU()(x) - torch.nn.functional.gelu(x)).abs().max() > 1e-2  # the parity above can tell them apart


def test_named_activation_and_its_check():
    model = vision_attn.create_model("vit_base_patch16_clip_224", **SMALL, act_layer="quick_gelu")
    assert isinstance(model.blocks[0].mlp.act, QuickGELU)
    with pytest.raises(vision_attn.errors.ConfigError, match="act_layer='swish'"):
        vision_attn.create_model("vit_base_patch16_clip_224", **SMALL, act_layer="swish")


# ------------------------------------------------------------------------------------------------
# OpenAI CLIP / open_clip layout: visual.conv1, visual.class_embedding, ..., visual.proj
def open_clip_model(quick_gelu: bool, ls_init_value: float | None = None) -> open_clip.model.CLIP:
    """A tiny random open_clip CLIP (OpenAI's keys): image tower of 2 blocks, width 64, 4 heads, 16 px
    patches at 64 px, a 24-wide projection; a 1-block text tower (dropped by ours)."""
    vision = dict(layers=2, width=64, head_width=16, patch_size=16, image_size=64, ls_init_value=ls_init_value)
    text = dict(context_length=8, vocab_size=100, width=32, heads=4, layers=1)
    return randomise(open_clip.model.CLIP(24, vision, text, quick_gelu=quick_gelu)).eval()


@pytest.mark.parametrize("quick_gelu, tower_only, head_bias, layer_scale", [
    (True, False, True, None), (False, True, True, None), (True, False, False, None),
    (False, False, True, 0.5),  # open_clip's ls_init_value: ls_1/ls_2.gamma -> ls1/ls2.gamma
])
def test_open_clip_weights_same_image_embedding(tmp_path, quick_gelu, tower_only, head_bias, layer_scale):
    peer = open_clip_model(quick_gelu, layer_scale)
    state = peer.visual.state_dict() if tower_only else peer.state_dict()  # the tower alone: no visual. prefix
    path = tmp_path / "open_clip.pt"
    torch.save(state, path)
    name = "vit_base_patch16_clip_quickgelu_224" if quick_gelu else "vit_base_patch16_clip_224"
    ours = vision_attn.create_model(name, pretrained=path, **{**SMALL, "num_classes": 24}, head_bias=head_bias,
                                    init_values=layer_scale).eval()
    assert (ours.head.bias is not None) == head_bias
    if head_bias:
        assert not ours.head.bias.any()  # the projection has no bias: zeros, as timm converts
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert_close(ours(x), peer.encode_image(x), 1e-4)


@pytest.mark.parametrize("key", ["visual.attn_pool.query", "unknown_tower.weight"])
def test_open_clip_unknown_keys_are_named(tmp_path, key):
    state = open_clip_model(True).state_dict()
    state[key] = torch.zeros(3)
    path = tmp_path / "open_clip.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match=key.replace(".", r"\.")):
        vision_attn.create_model("vit_base_patch16_clip_quickgelu_224", pretrained=path, **{**SMALL, "num_classes": 24})


# ------------------------------------------------------------------------------------------------
# timm's convention for the towers' heads: num_classes=0 gives the pooled features before the
# projection; without num_classes an open_clip file's projection is the head (timm's configuration)
def _pre_projection(peer: open_clip.model.CLIP, x: torch.Tensor) -> torch.Tensor:
    """open_clip's pooled class token before ``proj``: ln_post's output (it normalises every token
    before pooling, open_clip's default) at the class token, read by a hook."""
    seen = []
    handle = peer.visual.ln_post.register_forward_hook(lambda m, i, o: seen.append(o))
    with torch.no_grad():
        peer.encode_image(x)
    handle.remove()
    return seen[0][:, 0]


@pytest.mark.parametrize("tower_only", [False, True])
def test_open_clip_file_headless_and_with_its_projection(tmp_path, tower_only):
    peer = open_clip_model(quick_gelu=False)
    path = tmp_path / "open_clip.pt"
    torch.save(peer.visual.state_dict() if tower_only else peer.state_dict(), path)
    small = {k: v for k, v in SMALL.items() if k != "num_classes"}
    x = torch.randn(2, 3, 64, 64)
    timm_tower = timm.create_model("vit_base_patch32_clip_224", pretrained=False, **{**small, "patch_size": 16,
                                                                                  "num_classes": 24}).eval()
    # timm's converter reads the full CLIP state dict (visual.*): the same tensors as the tower's file
    timm_tower.load_state_dict(timm.models.vision_transformer.checkpoint_filter_fn(peer.state_dict(), timm_tower))

    headless = vision_attn.create_model("vit_base_patch32_clip_224", pretrained=path, num_classes=0,
                                        **small, patch_size=16).eval()
    assert isinstance(headless.head, torch.nn.Identity)
    with torch.no_grad():
        assert_close(headless(x), _pre_projection(peer, x), 1e-4)
        assert_close(headless(x), timm_tower.forward_head(timm_tower.forward_features(x), pre_logits=True), 1e-4)

    tower = vision_attn.create_model("vit_base_patch32_clip_224", pretrained=path, **small, patch_size=16).eval()
    assert tower.num_classes == tower.head.out_features == 24  # the projection, not a new 1000-class head
    with torch.no_grad():
        assert_close(tower(x), peer.encode_image(x), 1e-4)
        assert_close(tower(x), timm_tower(x), 1e-4)


def open_clip_siglip_tower() -> open_clip.timm_model.TimmModel:
    """open_clip's SigLIP image tower (ViT-B-16-SigLIP's vision_cfg: timm_model_name
    vit_base_patch16_siglip_224, timm_pool "map", timm_proj "none"), small: built as open_clip builds it
    (on the meta device), with its trunk made by the same timm.create_model call at a small size."""
    with torch.device("meta"):
        tower = open_clip.timm_model.TimmModel("vit_base_patch16_siglip_224", 768, image_size=224, pool="map",
                                               proj="none")
    small = {k: v for k, v in SMALL.items() if k != "num_classes"}
    tower.trunk = timm.create_model("vit_base_patch16_siglip_224", pretrained=False, num_classes=0,
                                    global_pool="map", **small)
    return randomise(tower).eval()


@pytest.mark.parametrize("prefix", ["visual.", ""])
def test_open_clip_siglip_tower_loads(tmp_path, prefix):
    """An open_clip SigLIP file (the tower under visual. beside the text tower's keys, or the tower
    alone) loads: its timm trunk's keys, no head (timm's num_classes=0), the same image embedding."""
    peer = open_clip_siglip_tower()
    state = {prefix + k: v for k, v in peer.state_dict().items()}
    if prefix:
        state.update({"logit_scale": torch.ones([]), "logit_bias": torch.zeros([]),
                      "text.token_embedding.weight": torch.zeros(10, 4)})
    path = tmp_path / "siglip.pt"
    torch.save(state, path)
    small = {k: v for k, v in SMALL.items() if k != "num_classes"}
    x = torch.randn(2, 3, 64, 64)
    for kwargs in ({}, {"num_classes": 0}):
        ours = vision_attn.create_model("vit_base_patch16_siglip_224", pretrained=path, **small, **kwargs).eval()
        assert ours.num_classes == 0
        with torch.no_grad():
            assert_close(ours(x), peer(x), 1e-4)


def test_timm_clip_file_with_a_classifier_loads_headless(tmp_path):
    """timm's own file with a 1000-class head, asked for num_classes=0: the head is dropped, as timm does."""
    kwargs = {**SMALL, "patch_size": 16}
    peer = randomise(timm.create_model("vit_base_patch32_clip_224", pretrained=False, **kwargs)).eval()
    path = tmp_path / "timm.pth"
    torch.save(peer.state_dict(), path)
    ours = vision_attn.create_model("vit_base_patch32_clip_224", pretrained=path, **{**kwargs, "num_classes": 0}).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert_close(ours(x), peer.forward_head(peer.forward_features(x), pre_logits=True), 1e-5)


def test_open_clip_training_checkpoint_loads_with_its_projection(tmp_path):
    """open_clip's training script saves {"epoch", "name", "state_dict"} with DDP's module. prefix."""
    peer = open_clip_model(quick_gelu=False)
    path = tmp_path / "epoch_1.pt"
    torch.save({"epoch": 1, "name": "run", "state_dict": {f"module.{k}": v for k, v in peer.state_dict().items()}}, path)
    small = {k: v for k, v in SMALL.items() if k != "num_classes"}
    ours = vision_attn.create_model("vit_base_patch32_clip_224", pretrained=path, **small, patch_size=16).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert_close(ours(x), peer.encode_image(x), 1e-4)
