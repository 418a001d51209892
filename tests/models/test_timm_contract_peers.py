"""The real configurations of the registered names against timm (where timm has the name) and
torchvision (its names): feature_info, features_only defaults, pretrained_cfg, and what timm's data
helpers resolve from our models. Models are built on the meta device: no weights, no forward."""
from __future__ import annotations

import math
import re

import pytest
import timm
import torch
import torchvision
from timm.data import create_transform, resolve_model_data_config

import vision_attn

from .small import ALL_NAMES

TIMM_NAMES = [n for n in ALL_NAMES if timm.is_model(n)]
TORCHVISION_NAMES = [n for n in ALL_NAMES if not timm.is_model(n)]
CFG_FIELDS = ("input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode", "num_classes", "first_conv",
              "classifier")


def _meta(build, *args, **kwargs):
    with torch.device("meta"):
        return build(*args, **kwargs)


def test_the_names_split_between_the_peers():
    assert len(TIMM_NAMES) == 48 and set(TORCHVISION_NAMES) == {
        "vit_b_16", "vit_b_32", "vit_l_16", "swin_t", "swin_s", "swin_b", "swin_v2_t", "swin_v2_s", "swin_v2_b"}


@pytest.mark.parametrize("name", TIMM_NAMES)
def test_like_timm(name):
    ours, theirs = _meta(vision_attn.create_model, name), _meta(timm.create_model, name)
    assert [(f["num_chs"], f["reduction"]) for f in ours.feature_info] == \
           [(f["num_chs"], f["reduction"]) for f in theirs.feature_info]
    assert (ours.num_classes, ours.num_features, ours.head_hidden_size) == \
           (theirs.num_classes, theirs.num_features, theirs.head_hidden_size)
    for field in CFG_FIELDS:
        assert ours.pretrained_cfg[field] == theirs.pretrained_cfg[field], field
    assert resolve_model_data_config(ours) == resolve_model_data_config(theirs)


@pytest.mark.parametrize("name", TIMM_NAMES)
def test_features_only_like_timm(name):
    ours = _meta(vision_attn.create_model, name, features_only=True)
    theirs = _meta(timm.create_model, name, features_only=True)
    assert ours.feature_info.channels() == theirs.feature_info.channels()
    assert ours.feature_info.reduction() == theirs.feature_info.reduction()
    if not name.startswith("resnet"):  # timm names a ResNet's stem act1, torchvision relu
        assert ours.feature_info.module_name() == theirs.feature_info.module_name()


@pytest.mark.parametrize("name", TORCHVISION_NAMES)
def test_torchvision_names_take_torchvisions_preprocessing(name):
    """Resize to crop / crop_pct, centre-crop, interpolation, mean and std of torchvision's IMAGENET1K_V1."""
    weights = torchvision.models.get_model_weights(name).IMAGENET1K_V1
    preset = weights.transforms()
    cfg = resolve_model_data_config(_meta(vision_attn.create_model, name))
    assert cfg["input_size"] == (3, *preset.crop_size * 2)
    assert math.floor(preset.crop_size[0] / cfg["crop_pct"]) == preset.resize_size[0]  # timm's resize rule
    assert cfg["interpolation"] == preset.interpolation.value
    assert cfg["mean"] == tuple(preset.mean) and cfg["std"] == tuple(preset.std)


def test_timms_transform_from_our_model():
    """timm's eval transform, configured from a 384 px model: resize to 384 / 1.0, crop 384, bicubic."""
    model = _meta(vision_attn.create_model, "vit_base_patch16_384")
    transform = create_transform(**resolve_model_data_config(model))
    resize, crop = transform.transforms[0], transform.transforms[1]
    assert resize.size == 384 and crop.size == (384, 384) and resize.interpolation.value == "bicubic"
    assert tuple(transform.transforms[-1].mean.tolist()) == (0.5, 0.5, 0.5)


def test_pretrained_cfg_follows_the_build():
    model = _meta(vision_attn.create_model, "vit_tiny_patch16_224", img_size=320, num_classes=10, in_chans=1)
    cfg = model.pretrained_cfg
    assert cfg["input_size"] == (1, 320, 320) and cfg["num_classes"] == 10 and cfg["crop_pct"] == 0.9
    assert resolve_model_data_config(model)["input_size"] == (1, 320, 320)


def _classifier_key(key: str) -> str:
    """A key of timm's features_only model -> the classifier's (ViT: under ``model.``; Swin: ``layers_N``)."""
    return re.sub(r"^layers_(\d+)\.", r"layers.\1.", key.removeprefix("model."))


@pytest.mark.parametrize("name, size", [("vit_tiny_patch16_224", (224, 224)), ("swin_tiny_patch4_window7_224", (224, 224)),
                                        ("resnet18", (96, 128))])
def test_features_only_maps_equal_timms_with_the_same_weights(name, size):
    weights = timm.create_model(name, pretrained=False).state_dict()
    theirs = timm.create_model(name, features_only=True, pretrained=False).eval()
    theirs.load_state_dict({k: weights[_classifier_key(k)] for k in theirs.state_dict()})
    ours = vision_attn.create_model(name, features_only=True).eval()
    ours.model.load_state_dict({k: weights[k] for k in ours.model.state_dict()})
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        want, got = theirs(x), ours(x)
    assert len(got) == len(want) == len(ours.feature_info)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
