"""The real configurations of the registered names against timm (where timm has the name) and
torchvision (its names): feature_info, features_only defaults, pretrained_cfg, and what timm's data
helpers resolve from our models. Models are built on the meta device: no weights, no forward."""
from __future__ import annotations

import functools
import math
import re

import pytest
import timm
import torch
import torchvision
from timm.data import create_transform, resolve_model_data_config

import vision_attn
from vision_attn import ConfigError

from .small import ALL_NAMES

TIMM_NAMES = [n for n in ALL_NAMES if timm.is_model(n)]
TORCHVISION_NAMES = [n for n in ALL_NAMES if not timm.is_model(n)]
CFG_FIELDS = ("input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode", "num_classes", "first_conv",
              "classifier")
CFG_KEYS_TIMM_READS = ("input_size", "test_input_size", "fixed_input_size", "interpolation", "crop_pct", "test_crop_pct",
                       "crop_mode", "mean", "std", "num_classes", "pool_size", "first_conv", "classifier")
"""What timm.data.resolve_data_config, apply_test_time_pool, load_pretrained and the features_only
builder read from a pretrained_cfg (timm leaves out a None key unless it is pool_size, first_conv or
classifier, and `"test_input_size" in cfg` decides apply_test_time_pool)."""


OWN_FIRST_CONV = {"naflexvit_base_patch16_siglip": "patch_embed.proj"}
"""Where our first_conv names our own module: timm's NaFlex ViT embeds patches with a Linear
``embeds.proj``; ours with the same weights as the patch convolution (its file's keys are mapped)."""


def _meta(build, *args, **kwargs):
    with torch.device("meta"):
        return build(*args, **kwargs)


def test_the_names_split_between_the_peers():
    assert len(TIMM_NAMES) == 58 and set(TORCHVISION_NAMES) == {  # + 2 DINOv3, 2 ConvNeXt, 2 Hiera, 1 SigLIP 2 (small.STANDS_FOR)
        "vit_b_16", "vit_b_32", "vit_l_16", "swin_t", "swin_s", "swin_b", "swin_v2_t", "swin_v2_s", "swin_v2_b"}


@pytest.mark.parametrize("name", TIMM_NAMES)
def test_like_timm(name):
    ours, theirs = _meta(vision_attn.create_model, name), _meta(timm.create_model, name)
    assert [(f["num_chs"], f["reduction"]) for f in ours.feature_info] == \
           [(f["num_chs"], f["reduction"]) for f in theirs.feature_info]
    assert (ours.num_classes, ours.num_features, ours.head_hidden_size) == \
           (theirs.num_classes, theirs.num_features, theirs.head_hidden_size)
    expected = dict(theirs.pretrained_cfg, **({"first_conv": OWN_FIRST_CONV[name]} if name in OWN_FIRST_CONV else {}))
    for field in CFG_FIELDS:
        assert ours.pretrained_cfg[field] == expected[field], field
    for key in CFG_KEYS_TIMM_READS:  # every key timm's helpers read: there where timm's is, and equal
        assert (key in ours.pretrained_cfg) == (key in expected), key
        assert ours.pretrained_cfg.get(key) == expected.get(key), key
    assert resolve_model_data_config(ours) == resolve_model_data_config(theirs)
    assert resolve_model_data_config(ours, use_test_size=True) == resolve_model_data_config(theirs, use_test_size=True)


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


# ------------------------------------------------------------------------------------------------
# The rest of timm's contract: every feature_cls, every cfg key timm's helpers read, DINOv2's sizes.


@pytest.mark.parametrize("name, kwargs", [("swin_tiny_patch4_window7_224", dict(img_size=384, window_size=12)),
                                          ("swinv2_tiny_window8_256", dict(img_size=192, window_size=6)),
                                          ("resnet18", dict(img_size=320))])
def test_pool_size_is_the_map_the_head_pools_at_the_built_size(name, kwargs):
    """timm keeps its weights' pool_size (7, 7) for a Swin built at 384; ours says what the model pools
    there: the spatial size of timm's own forward_features at that size."""
    size = kwargs["img_size"]
    theirs_kwargs = {k: v for k, v in kwargs.items() if not name.startswith("resnet") or k != "img_size"}
    theirs = _meta(timm.create_model, name, **theirs_kwargs)
    with torch.device("meta"):
        features = theirs.forward_features(torch.empty(1, 3, size, size))
    spatial = tuple(features.shape[1:3]) if name.startswith("swin") else tuple(features.shape[2:])
    ours = _meta(vision_attn.create_model, name, **kwargs)
    assert ours.pretrained_cfg["pool_size"] == spatial
    assert ours.pretrained_cfg["input_size"] == (3, size, size)


FEATURE_CLS = ("list", "dict", "hook", "fx", "getter")
FEATURE_CASES = {  # depth-reduced real architectures of each family, at a size their levels divide
    "vit_tiny_patch16_224": (dict(depth=4, embed_dim=48, num_heads=3, img_size=64), (64, 64)),
    "deit_tiny_distilled_patch16_224": (dict(depth=4, embed_dim=48, num_heads=3, img_size=64), (64, 64)),
    "vit_small_patch14_reg4_dinov2": (dict(depth=4, embed_dim=48, num_heads=3, img_size=56), (56, 56)),
    "vit_base_patch16_siglip_224": (dict(depth=4, embed_dim=48, num_heads=3, img_size=64), (64, 64)),
    "swin_tiny_patch4_window7_224": (dict(depths=(2, 1, 1, 1), embed_dim=16, num_heads=(1, 1, 2, 2), img_size=64,
                                          window_size=2), (64, 64)),
    "swinv2_tiny_window8_256": (dict(depths=(2, 1, 1, 1), embed_dim=16, num_heads=(1, 1, 2, 2), img_size=64,
                                     window_size=2), (64, 64)),
    "resnet18": ({}, (32, 64)),
}
ON_META = {"resnet18"}
"""Compared on the meta device (containers, keys, shapes; its maps' values against timm's are
test_features_only_maps_equal_timms_with_the_same_weights'): an 11 M parameter model built six times."""


def _full_key(key: str) -> str:
    """A key of timm's features_only model -> its classifier's: under ``model.`` (getter), ``body.`` (hook
    on the whole model) or ``graph_module.`` (fx); a Swin's stages flattened as ``layers_N``."""
    for prefix in ("model.", "body.", "graph_module."):
        key = key.removeprefix(prefix)
    return re.sub(r"^layers_(\d+)\.", r"layers.\1.", key)


@functools.cache
def _timm_weights(name: str) -> dict[str, torch.Tensor]:
    return timm.create_model(name, **FEATURE_CASES[name][0]).state_dict()


def _timm_features(name, **feature_kwargs):
    """timm's features_only model of FEATURE_CASES[name] with the weights of its classifier (on the
    meta device for ON_META names)."""
    if name in ON_META:
        return _meta(timm.create_model, name, features_only=True, **FEATURE_CASES[name][0], **feature_kwargs), None
    weights = _timm_weights(name)
    model = timm.create_model(name, features_only=True, **FEATURE_CASES[name][0], **feature_kwargs).eval()
    state = model.state_dict()
    loaded = {k: weights[_full_key(k)] for k in state if _full_key(k) in weights}
    assert all(k.startswith("graph_module._tensor_constant") for k in set(state) - set(loaded))  # fx's constants
    model.load_state_dict(loaded, strict=False)
    return model, weights


def _same_container(ours, theirs, x: torch.Tensor) -> tuple[list, list]:
    """Both feature models on ``x``: the same container (list, or dict with the same keys) of maps of
    the same shapes; the maps, ours then timm's."""
    with torch.no_grad():
        want, got = theirs(x), ours(x)
    assert type(got) is type(want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        want, got = list(want.values()), list(got.values())
    assert [t.shape for t in got] == [t.shape for t in want]
    return list(got), list(want)


@pytest.mark.parametrize("feature_cls", FEATURE_CLS)
@pytest.mark.parametrize("name", list(FEATURE_CASES))
def test_feature_cls_gives_what_timms_gives(name, feature_cls):
    """The same container (list or OrderedDict, and its keys), count, shapes, layout and values as
    timm's features_only model of the name with the same weights; where timm refuses the value (a
    ViT's list and dict), a ConfigError naming the values that work."""
    kwargs, size = FEATURE_CASES[name]
    try:
        theirs, weights = _timm_features(name, feature_cls=feature_cls)
    except AssertionError:  # timm: "Return layers (...) are not present in model"
        with pytest.raises(ConfigError, match="feature_cls='hook' or 'fx'.*'getter'"):
            vision_attn.create_model(name, **kwargs, features_only=True, feature_cls=feature_cls)
        return
    device = "meta" if name in ON_META else "cpu"
    with torch.device(device):
        ours = vision_attn.create_model(name, **kwargs, features_only=True, feature_cls=feature_cls).eval()
    if weights is not None:
        ours.model.load_state_dict({k: weights[k] for k in ours.model.state_dict()})
    got, want = _same_container(ours, theirs, torch.randn(2, 3, *size, device=device))
    if weights is not None:
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
    assert ours.feature_info.channels() == theirs.feature_info.channels()
    assert ours.feature_info.module_name() == theirs.feature_info.module_name() or name.startswith("resnet")
    for key in CFG_KEYS_TIMM_READS:  # timm's features_only cfg drops num_classes and classifier
        assert (key in ours.pretrained_cfg) == (key in theirs.pretrained_cfg), key


@pytest.mark.parametrize("name, feature_cls, out_indices", [("resnet18", "dict", 2), ("resnet18", "DICT", (-1,)),
                                                             ("swin_tiny_patch4_window7_224", "Dict", (3, 1)),
                                                             ("resnet18", "FeatureHookNet", (1, 3)),
                                                             ("vit_tiny_patch16_224", "Hook", (0, 2)),
                                                             ("vit_tiny_patch16_224", "GETTER", -2)])
def test_feature_cls_spellings_and_indices_like_timm(name, feature_cls, out_indices):
    """timm's reading of the name (any case; any name with 'hook' in it) and its dict keys: the
    indices as given (an int n: the last n as '-n'..'-1')."""
    kwargs, size = FEATURE_CASES[name]
    out_indices = (out_indices,) if out_indices == -2 else out_indices
    theirs, _ = _timm_features(name, feature_cls=feature_cls, out_indices=out_indices)
    device = "meta" if name in ON_META else "cpu"
    with torch.device(device):
        ours = vision_attn.create_model(name, **kwargs, features_only=True, feature_cls=feature_cls,
                                        out_indices=out_indices)
    _same_container(ours, theirs, torch.randn(1, 3, *size, device=device))


def test_feature_cls_is_checked():
    with pytest.raises(AssertionError):  # timm
        timm.create_model("resnet18", features_only=True, feature_cls="graph")
    with pytest.raises(ConfigError, match="'list', 'dict', 'hook', 'fx', 'getter'"):
        vision_attn.create_model("resnet18", features_only=True, feature_cls="graph")
    with pytest.raises(ConfigError, match="add features_only=True"):
        vision_attn.create_model("resnet18", feature_cls="getter")
    for extra in (dict(output_fmt="NCHW"), dict(feature_cfg={"norm": True})):
        with pytest.raises(ConfigError, match="applies to feature_cls='getter'"):
            vision_attn.create_model("swin_tiny_patch4_window7_224", depths=(1, 1, 1, 1), features_only=True,
                                     feature_cls="hook", **extra)


DINOV2_NAMES = [n for n in TIMM_NAMES if "dinov2" in n]


@pytest.mark.parametrize("name", DINOV2_NAMES)
def test_dinov2_takes_the_sizes_timms_takes(name):
    """Built at 224 (timm's img_size=224), the position table and every parameter shaped as timm's."""
    assert len(DINOV2_NAMES) == 8
    ours, theirs = _meta(vision_attn.create_model, name, img_size=224), _meta(timm.create_model, name, img_size=224)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}
    assert ours.patch_embed.img_size == theirs.patch_embed.img_size == ours.pretrained_cfg["input_size"][1:]


@pytest.mark.parametrize("name", ["vit_small_patch14_dinov2", "vit_small_patch14_reg4_dinov2"])
@pytest.mark.parametrize("img_size, run", [(None, [(518, 518), (224, 224), (140, 182)]),
                                           (224, [(224, 224), (168, 168), (126, 280)])])
def test_dinov2_runs_every_multiple_of_14_as_timms_dynamic_img_size(name, img_size, run):
    """timm runs other sizes with dynamic_img_size=True; ours does by default, with the same outputs
    (the position table resampled the same way)."""
    kwargs = dict(depth=1, embed_dim=48, num_heads=3) | ({} if img_size is None else dict(img_size=img_size))
    theirs = timm.create_model(name, dynamic_img_size=True, **kwargs).eval()
    ours = vision_attn.create_model(name, dynamic_img_size=True, **kwargs).eval()  # accepted; ours runs any size
    ours.load_state_dict(theirs.state_dict())
    for size in run:
        x = torch.randn(1, 3, *size)
        with torch.no_grad():
            torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-4)
