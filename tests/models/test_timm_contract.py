"""timm's model contract on every registered name: forward and backward, feature maps against
feature_info at two sizes, intermediates against forward_features, features_only, torch.fx (and
torchvision's create_feature_extractor), gradient checkpointing, reset_classifier(0).

Each test builds the smallest model of the name (tests/models/small.py); the real configurations'
fields are checked against timm and torchvision in test_timm_contract_peers.py."""
from __future__ import annotations

import pytest
import torch
from torch.fx import symbolic_trace
from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names

import vision_attn
from vision_attn import ConfigError
from vision_attn.models.features import FeatureModule
from vision_attn.models.convnext import ConvNeXt
from vision_attn.models.hiera import Hiera
from vision_attn.models.resnet import ResNet
from vision_attn.models.sam2_hiera import HieraDet
from vision_attn.models.swin import SwinTransformer
from vision_attn.models.vit import VisionTransformer

from .small import ALL_NAMES, family, input_sizes, small_kwargs, small_model


def _logits(out) -> torch.Tensor:
    """One tensor to differentiate: DeiT in training returns (class, distillation) logits."""
    return out[0] + out[1] if isinstance(out, tuple) else out


def _grads(model: torch.nn.Module, out: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    out.square().sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _as_map(model: torch.nn.Module, features: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """forward_features' output for images ``x`` as the last level's NCHW map."""
    if isinstance(model, VisionTransformer):
        tokens = features[:, model.num_prefix_tokens:]
        p = model.patch_embed.patch_size
        return tokens.reshape(tokens.shape[0], x.shape[2] // p[0], x.shape[3] // p[1], -1).permute(0, 3, 1, 2)
    if isinstance(model, (SwinTransformer, HieraDet)):
        return features.permute(0, 3, 1, 2)
    if isinstance(model, Hiera):  # the last stage's tokens, in raster order once every pooling is done
        return model.rolled(features, len(model.feature_info) - 1).permute(0, 3, 1, 2)
    return features


@pytest.mark.parametrize("name", ALL_NAMES)
def test_contract_attributes(name):
    model = small_model(name)
    assert model.num_classes == 5 and model.head_hidden_size == model.num_features > 0
    for level in model.feature_info:
        assert set(level) == {"num_chs", "reduction", "module"}
        assert model.get_submodule(level["module"]) is not None
    assert model.feature_info[-1]["num_chs"] == model.num_features
    cfg = model.pretrained_cfg
    assert model.default_cfg is cfg and cfg["architecture"] == name and cfg["num_classes"] == 5
    assert {"input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std", "first_conv", "classifier"} <= set(cfg)
    assert model.get_submodule(cfg["first_conv"]).in_channels == cfg["input_size"][0] == 3


@pytest.mark.parametrize("name", ALL_NAMES)
def test_forward_and_backward_reach_every_parameter(name):
    model = small_model(name).train()
    h, w = input_sizes(name)[1]
    out = model(torch.randn(2, 3, h, w))
    assert _logits(out).shape == (2, 5)
    _logits(out).square().sum().backward()
    for key, param in model.named_parameters():
        assert param.grad is not None, f"{key} got no gradient"
        assert torch.isfinite(param.grad).all(), f"{key} has a non-finite gradient"


@pytest.mark.parametrize("name", ALL_NAMES)
def test_feature_maps_follow_feature_info_at_two_sizes(name):
    model = small_model(name)
    info = model.feature_info
    features = vision_attn.create_model(name, **_without_classes(name), features_only=True,
                                        out_indices=list(range(len(info))), output_fmt="NCHW").eval()
    assert isinstance(features, FeatureModule) and features.feature_info.channels() == [f["num_chs"] for f in info]
    for h, w in input_sizes(name):
        with torch.no_grad():
            maps = features(torch.randn(2, 3, h, w))
        assert [tuple(m.shape) for m in maps] == [(2, f["num_chs"], h // f["reduction"], w // f["reduction"]) for f in info]


def _without_classes(name: str) -> dict:
    return {k: v for k, v in small_kwargs(name).items() if k != "num_classes"}


@pytest.mark.parametrize("name", ALL_NAMES)
def test_intermediates_against_forward_features(name):
    model = small_model(name).eval()
    x = torch.randn(2, 3, *input_sizes(name)[1])
    n = len(model.feature_info)
    with torch.no_grad():
        features = model.forward_features(x)
        final, maps = model.forward_intermediates(x, norm=True)
        only = model.forward_intermediates(x, indices=[0, -1], intermediates_only=True)
        early = model.forward_intermediates(x, indices=[0], stop_early=True, intermediates_only=True)
        last_two = model.forward_intermediates(x, indices=2, intermediates_only=True)
    torch.testing.assert_close(final, features)
    assert len(maps) == n
    torch.testing.assert_close(maps[-1], _as_map(model, features, x))  # the last level, normalised, is forward_features
    with torch.no_grad():
        raw = model.forward_intermediates(x, intermediates_only=True)
    torch.testing.assert_close(only[1], raw[-1])
    torch.testing.assert_close(early[0], only[0])
    torch.testing.assert_close(last_two[0], raw[-2])


@pytest.mark.parametrize("name", ALL_NAMES)
def test_fx_trace_forward_and_backward_equal_eager_to_the_bit(name):
    """timm's contract (``torch.all(traced(x) == model(x))``): the graph runs the kernels the eager
    model runs (the kernel dispatchers and the size-dependent steps are leaf nodes that choose at
    run time), and takes the same paths (a ViT's short last block included)."""
    model = small_model(name).eval()  # no dropout: eager and traced runs must agree exactly
    graph = symbolic_trace(model)
    for h, w in input_sizes(name):  # one graph for both sizes: the size-dependent steps are leaves
        x = torch.randn(2, 3, h, w)
        want = model(x)
        got = graph(x)
        assert torch.equal(got, want)
        with torch.no_grad():  # inference: the fused inference kernels, in both
            assert torch.equal(graph(x), model(x))
    theirs, ours = _grads(graph, got), _grads(model, want)
    assert theirs.keys() == ours.keys() == {n for n, _ in model.named_parameters()}
    for key in ours:
        assert torch.equal(theirs[key], ours[key]), key


@pytest.mark.parametrize("name", ALL_NAMES)
def test_feature_extractor_of_the_last_node_equals_eager_to_the_bit(name):
    """timm's own fx test: torchvision's extractor returning the graph's last node, in eval mode."""
    model = small_model(name).eval()
    train_nodes, eval_nodes = get_graph_node_names(model)
    extractor = create_feature_extractor(model, train_return_nodes=[train_nodes[-1]],
                                         eval_return_nodes=[eval_nodes[-1]]).eval()
    x = torch.randn(2, 3, *input_sizes(name)[1])
    with torch.no_grad():
        (got,) = extractor(x).values()
        assert torch.all(got == model(x))


@pytest.mark.parametrize("name", ALL_NAMES)
def test_torchvision_feature_extractor_gives_the_levels(name):
    model = small_model(name).eval()
    modules = [f["module"] for f in model.feature_info]
    extractor = create_feature_extractor(model, return_nodes={m: str(i) for i, m in enumerate(modules)})
    x = torch.randn(2, 3, *input_sizes(name)[1])
    with torch.no_grad():
        got = extractor(x)
        if isinstance(model, VisionTransformer):  # block outputs: tokens, the prefix first
            want = model.forward_intermediates(x, output_fmt="NLC", intermediates_only=True)
            got = {k: v[:, model.num_prefix_tokens:] for k, v in got.items()}
        elif isinstance(model, (SwinTransformer, HieraDet)):  # stage outputs, NHWC
            want = model.forward_intermediates(x, output_fmt="NHWC", intermediates_only=True)
        elif isinstance(model, Hiera):  # stage outputs: unrolled tokens, rolled back here
            want = model.forward_intermediates(x, output_fmt="NHWC", intermediates_only=True)
            got = {k: model.rolled(v, int(k)) for k, v in got.items()}
        else:
            want = model.forward_intermediates(x, intermediates_only=True)
    assert list(got) == [str(i) for i in range(len(modules))]
    for a, b in zip(got.values(), want):
        torch.testing.assert_close(a, b)


def _saved_tensors(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The output, and how many tensors autograd keeps for the backward pass of the forward."""
    count = 0

    def pack(t):
        nonlocal count
        count += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    return out, count


@pytest.mark.parametrize("name", ALL_NAMES)
def test_grad_checkpointing_keeps_outputs_and_gradients(name):
    model = small_model(name).eval()  # eval: no dropout, BatchNorm statistics fixed
    x = torch.randn(2, 3, *input_sizes(name)[0])
    out, kept = _saved_tensors(model, x)
    grads = _grads(model, out)
    model.set_grad_checkpointing()
    assert model.grad_checkpointing
    out_ckpt, kept_ckpt = _saved_tensors(model, x)
    grads_ckpt = _grads(model, out_ckpt)
    assert kept_ckpt < kept  # the blocks' activations are recomputed, not kept
    torch.testing.assert_close(out_ckpt, out)
    assert grads_ckpt.keys() == grads.keys()
    for key in grads:
        torch.testing.assert_close(grads_ckpt[key], grads[key], msg=key)
    model.set_grad_checkpointing(False)
    assert _saved_tensors(model, x)[1] == kept


@pytest.mark.parametrize("name", ALL_NAMES)
def test_reset_classifier_zero_gives_pooled_features(name):
    model = small_model(name).eval()
    x = torch.randn(2, 3, *input_sizes(name)[0])
    with torch.no_grad():
        pooled = model.forward_head(model.forward_features(x), pre_logits=True)
        model.reset_classifier(0)
        out = model(x)
    assert model.num_classes == 0 and out.shape == (2, model.head_hidden_size)
    torch.testing.assert_close(out, pooled)
    model.reset_classifier(3)
    assert model.num_classes == 3 and model(x).shape == (2, 3)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_features_only_keeps_only_what_it_uses(name):
    first = vision_attn.create_model(name, **_without_classes(name), features_only=True, out_indices=[0])
    maps = first(torch.randn(2, 3, *input_sizes(name)[0]))
    assert len(maps) == 1 and first.feature_info.reduction() == [first.model.feature_info[0]["reduction"]]
    maps[0].square().sum().backward()
    unused = [n for n, p in first.named_parameters() if p.grad is None]
    assert not unused, f"parameters after the level taken were kept: {unused[:3]}"


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "swin_tiny_patch4_window7_224", "resnet18"])
def test_output_formats(name):
    model = small_model(name).eval()
    x = torch.randn(1, 3, *input_sizes(name)[0])
    nchw = model.forward_intermediates(x, indices=1, intermediates_only=True)[0]
    for fmt in model.output_fmts:
        m = model.forward_intermediates(x, indices=1, output_fmt=fmt, intermediates_only=True)[0]
        expected = {"NCHW": nchw, "NHWC": nchw.permute(0, 2, 3, 1), "NLC": nchw.flatten(2).transpose(1, 2)}[fmt]
        torch.testing.assert_close(m, expected)
    with pytest.raises(ConfigError, match="output_fmt='NDHW': this model gives feature maps as"):
        model.forward_intermediates(x, output_fmt="NDHW")


def test_features_only_defaults_are_timms():
    """ViT: the last three blocks, NCHW; Swin: all four stages, NHWC; ResNet: the stem and four stages."""
    with torch.device("meta"):
        vit = vision_attn.create_model("vit_tiny_patch16_224", features_only=True)
        swin = vision_attn.create_model("swin_tiny_patch4_window7_224", features_only=True)
        resnet = vision_attn.create_model("resnet50", features_only=True)
    assert vit.feature_info.module_name() == ["blocks.9", "blocks.10", "blocks.11"] and vit.output_fmt == "NCHW"
    assert len(vit.model.blocks) == 12 and isinstance(vit.model.norm, torch.nn.Identity)
    assert swin.out_indices == [0, 1, 2, 3] and swin.output_fmt == "NHWC"
    assert resnet.feature_info.channels() == [64, 256, 512, 1024, 2048]
    assert resnet.feature_info.reduction() == [2, 4, 8, 16, 32]


def test_feature_options_are_checked():
    with pytest.raises(ConfigError, match="out_indices applies to feature maps; add features_only=True"):
        vision_attn.create_model("resnet18", out_indices=[1, 2])
    with pytest.raises(ConfigError, match="feature_cfg key 'flatten' is not known; known: norm"):
        vision_attn.create_model("resnet18", features_only=True, feature_cfg={"flatten": True})
    with pytest.raises(ConfigError, match=r"indices=\[1, 5\]: 5 is not a feature level of the 5"):
        vision_attn.create_model("resnet18", features_only=True, out_indices=[1, 5])
    with pytest.raises(ConfigError, match="indices=4: the model has 2 feature levels"):
        small_model("vit_tiny_patch16_224").forward_intermediates(torch.randn(1, 3, 64, 64), indices=4)


def test_feature_norm_applies_the_final_norm():
    model = small_model("vit_tiny_patch16_224").eval()
    normed = vision_attn.create_model("vit_tiny_patch16_224", **_without_classes("vit_tiny_patch16_224"),
                                      features_only=True, out_indices=[0, 1], feature_cfg={"norm": True}).eval()
    normed.model.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("head.")})
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        want = model.forward_intermediates(x, norm=True, intermediates_only=True)
        got = normed(x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_the_families_cover_the_registry():
    families = (VisionTransformer, SwinTransformer, ResNet, ConvNeXt, Hiera, HieraDet)
    assert {family(n) for n in ALL_NAMES} >= set(families)
    assert all(issubclass(family(n), families) for n in ALL_NAMES)
