"""timm's own model checks (its tests/test_models.py: ``test_model_default_cfgs``,
``test_model_default_cfgs_non_std``, ``test_model_forward_intermediates``) run on every registered
name, in the small configurations of tests/models/small.py.

Those checks read a model's unpooled ``forward_features`` in the layout the model states as
``output_fmt`` (NCHW when it states none: timm's Swin says NHWC), call ``reset_classifier(0)`` and
``reset_classifier(0, '')`` (no classifier, no pooling: the map comes back unpooled) and ask
``forward_intermediates`` for NCHW maps. ViT names are among timm's "non-standard" models (tokens,
not a map): the second check. The checks are written once here and run on a timm Swin and ResNet
too, so that they are timm's conventions and not ours."""
from __future__ import annotations

import math

import pytest
import timm
import torch

import vision_attn
from vision_attn.models.hiera import Hiera
from vision_attn.models.vit import VisionTransformer

from .small import ALL_NAMES, family, input_sizes, small_kwargs

_AXES = {"NCHW": ((2, 3), 1), "NHWC": ((1, 2), 3)}


def _input(model: torch.nn.Module, name: str | None) -> torch.Tensor:
    cfg = model.pretrained_cfg
    if cfg.get("fixed_input_size") or name is None:
        return torch.randn(2, *cfg["input_size"])
    return torch.randn(2, 3, *input_sizes(name)[1])


def check_default_cfgs(model: torch.nn.Module, x: torch.Tensor) -> None:
    """timm's test_model_default_cfgs, the part that runs a model."""
    assert model.num_classes >= 0 and model.num_features > 0 and model.head_hidden_size > 0
    spatial, feat = _AXES[getattr(model, "output_fmt", "NCHW")]
    reduction = model.feature_info[-1]["reduction"]
    pool = (math.ceil(x.shape[2] / reduction), math.ceil(x.shape[3] / reduction))
    if tuple(x.shape[1:]) == tuple(model.pretrained_cfg["input_size"]):
        assert tuple(model.pretrained_cfg["pool_size"]) == pool
    with torch.no_grad():
        out = model.forward_features(x)
        pre = model.forward_head(out, pre_logits=True)
        assert (out.shape[spatial[0]], out.shape[spatial[1]]) == pool, "unpooled feature shape != config"
        assert out.shape[feat] == model.num_features, "unpooled feature dim != config"
        assert pre.shape[1] == model.head_hidden_size, "pre_logits feature dim != config"
        model.reset_classifier(0)
        out = model(x)
        assert out.ndim == 2 and out.shape[1] == model.head_hidden_size, "pooled num_features != config"
        model.reset_classifier(0, "")  # no classifier, no pooling
        out = model(x)
        assert out.ndim == 4 and (out.shape[spatial[0]], out.shape[spatial[1]]) == pool
        assert out.shape[feat] == model.num_features


def check_default_cfgs_non_std(model: torch.nn.Module, build_headless, x: torch.Tensor) -> None:
    """timm's test_model_default_cfgs_non_std (token models)."""
    with torch.no_grad():
        out = model.forward_features(x)
        pre = model.forward_head(out, pre_logits=True)
        assert out.shape[-1 if out.ndim == 3 else 1] == model.num_features
        assert pre.shape[1] == model.head_hidden_size
        model.reset_classifier(0)
        out = model(x)
        assert out.shape[-1 if out.ndim == 3 else 1] == model.head_hidden_size, "pooled num_features != config"
        headless = build_headless().eval()
        out = headless(x)
        assert out.shape[-1 if out.ndim == 3 else 1] == headless.num_features


def check_forward_intermediates(model: torch.nn.Module, x: torch.Tensor, output_fmt: str = "NCHW") -> None:
    """timm's test_model_forward_intermediates (NCHW, as asked), and the same for another layout."""
    spatial, feat = _AXES[output_fmt]
    assert len(model.feature_info) >= 3
    with torch.no_grad():
        final, maps = model.forward_intermediates(x, output_fmt=output_fmt)
        torch.testing.assert_close(final, model.forward_features(x))
    assert len(maps) == len(model.feature_info)
    for info, m in zip(model.feature_info, maps):
        assert m.ndim == 4 and m.shape[0] == x.shape[0] and m.shape[feat] == info["num_chs"]
        for axis, size in zip(spatial, x.shape[2:]):
            assert m.shape[axis] <= math.ceil(size / info["reduction"]) + 1
        assert not torch.isnan(m).any()


def _small(name: str, **extra) -> dict:
    """tests/models/small.py's sizes; ViTs of three blocks (timm's check wants three levels at least)."""
    return {**small_kwargs(name), **({"depth": 3} if issubclass(family(name), VisionTransformer) else {}), **extra}


@pytest.mark.parametrize("name", ALL_NAMES)
def test_timm_model_checks(name):
    model = vision_attn.create_model(name, **_small(name)).eval()
    x = _input(model, name)
    if issubclass(family(name), (VisionTransformer, Hiera)):  # timm's NON_STD_FILTERS: vit_*, deit*, hiera_*, ...
        check_default_cfgs_non_std(model, lambda: vision_attn.create_model(name, **_small(name, num_classes=0)), x)
    else:
        check_default_cfgs(model, x)
    model = vision_attn.create_model(name, **_small(name)).eval()
    for fmt in set(model.output_fmts) & set(_AXES):  # the map layouts (a ViT also gives tokens, NLC)
        check_forward_intermediates(model, x, fmt)


@pytest.mark.parametrize("name", ["swin_tiny_patch4_window7_224", "swinv2_tiny_window8_256", "resnet18"])
def test_the_checks_are_timms_conventions(name):
    """The same checks pass on timm's own models (small, random weights)."""
    small = {"resnet18": {}}.get(name, dict(embed_dim=16, depths=(1, 1, 1, 1), num_heads=(1, 1, 2, 2)))
    model = timm.create_model(name, pretrained=False, num_classes=5, **small).eval()
    x = torch.randn(2, *model.pretrained_cfg["input_size"]) if small else torch.randn(2, 3, 64, 96)
    check_default_cfgs(model, x)
    check_forward_intermediates(timm.create_model(name, pretrained=False, num_classes=5, **small).eval(), x)


def test_reset_classifier_global_pool_values():
    """timm's global_pool argument on each family: '' leaves the output unpooled (ViT: the tokens; Swin:
    the NHWC map; ResNet: the NCHW map), another pooling replaces the current one, unknown values and a
    classifier over unpooled ResNet maps are refused."""
    x = torch.randn(1, 3, 56, 56)
    vit = vision_attn.create_model("vit_small_patch14_dinov2", **_small("vit_small_patch14_dinov2", img_size=56)).eval()
    vit.reset_classifier(0, "")
    assert vit(x).shape == (1, 1 + 16, 48)
    vit.reset_classifier(3, "avg")
    assert vit.global_pool == "avg" and vit(x).shape == (1, 3)
    with pytest.raises(vision_attn.ConfigError, match="global_pool"):
        vit.reset_classifier(0, "max")
    swin = vision_attn.create_model("swin_tiny_patch4_window7_224", **_small("swin_tiny_patch4_window7_224")).eval()
    swin.reset_classifier(4, "")
    assert swin(torch.randn(1, 3, 64, 64)).shape == (1, 2, 2, 4)  # logits per position, as timm's
    resnet = vision_attn.create_model("resnet18", num_classes=5).eval()
    with pytest.raises(vision_attn.ConfigError, match="pooled"):
        resnet.reset_classifier(5, "")
    resnet.reset_classifier(0, "")
    assert resnet(torch.randn(1, 3, 64, 64)).shape == (1, 512, 2, 2)
