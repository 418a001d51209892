"""What each registered name expects of its input images: size, resize-and-crop, interpolation,
mean and std; timm's ``pretrained_cfg``.

Every registered variant names its configuration (``@register_model(cfg=...)``), and
:func:`~vision_attn.models.registry.create_model` puts it on the model as ``pretrained_cfg`` (and
``default_cfg``), a dict with timm's keys, so that ``timm.data.resolve_model_data_config(model)`` and
``timm.data.create_transform`` configure themselves from our models. Under timm's names the values
are those of timm's default weights for the name; under torchvision's names those of torchvision's
``IMAGENET1K_V1`` weights (``crop_pct`` = crop / resize, e.g. 224 / 256). The keys that timm's data
and feature helpers read are all there: ``input_size``, ``test_input_size`` and ``test_crop_pct``
(where timm's weights have them), ``fixed_input_size``, ``pool_size`` (the final map a CNN's or
Swin's head pools; None for a ViT), ``first_conv``, ``classifier``. ``input_size`` and ``pool_size``
follow a model built at another ``img_size`` (timm keeps its weights' values there: a Swin built at
384 says pool_size (7, 7) in timm, (12, 12) here, the map its head pools); ``num_classes`` and
``classifier`` follow the model.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from torch import nn

from vision_attn.layers.patch_embed import to_2tuple

__all__ = ["data_cfg", "model_cfg", "IMAGENET_MEAN", "IMAGENET_STD", "INCEPTION_MEAN", "INCEPTION_STD"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
INCEPTION_MEAN = (0.5, 0.5, 0.5)
"""The mean and std of Google's ViT weights (timm's ``augreg`` files): pixels scaled to [-1, 1]."""
INCEPTION_STD = (0.5, 0.5, 0.5)


def data_cfg(img_size: int, *, crop_pct: float, interpolation: str = "bicubic",
             mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
             first_conv: str = "patch_embed.proj", fixed_input_size: bool = True,
             test_img_size: int | None = None, test_crop_pct: float | None = None) -> dict[str, Any]:
    """A name's input configuration: square ``img_size`` images, resized to ``img_size / crop_pct``
    and centre-cropped, with ``interpolation``, normalised by ``mean`` and ``std``; ``first_conv`` is
    the layer that reads the image (timm adapts it to other channel counts). ``fixed_input_size``:
    timm's flag that the architecture is built for its input size (position embeddings, windows:
    ViT and Swin; our ViT and Swin also run at other sizes, resampling or padding); False for a CNN.
    ``test_img_size`` and ``test_crop_pct``: the evaluation size and crop the weights were measured
    at where it differs (timm's ``use_test_size``)."""
    cfg = dict(input_size=(3, img_size, img_size), fixed_input_size=fixed_input_size, interpolation=interpolation,
               crop_pct=crop_pct, crop_mode="center", mean=tuple(mean), std=tuple(std), first_conv=first_conv)
    if test_img_size is not None:
        cfg["test_input_size"] = (3, test_img_size, test_img_size)
    if test_crop_pct is not None:
        cfg["test_crop_pct"] = test_crop_pct
    return cfg


def model_cfg(name: str, cfg: dict[str, Any], model: nn.Module, img_size: int | tuple[int, int] | None) -> dict[str, Any]:
    """``cfg`` of the name ``name`` as built: its architecture name, the model's classes and classifier,
    ``img_size`` (where given) as the input size, and the size of the map the head pools there."""
    out = dict(cfg, architecture=name)
    in_chans = model.get_submodule(out["first_conv"]).in_channels
    size = to_2tuple(img_size) if img_size is not None else out["input_size"][1:]
    out["input_size"] = (in_chans, *size)
    if "test_input_size" in out:
        out["test_input_size"] = (in_chans, *out["test_input_size"][1:])
    out["pool_size"] = _pool_size(model, size)
    out["num_classes"] = getattr(model, "num_classes", None)
    keys = getattr(model, "classifier_keys", ())
    heads = tuple(h for h in dict.fromkeys(k.rsplit(".", 1)[0] for k in keys) if _has_module(model, h))
    out["classifier"] = heads[0] if len(heads) == 1 else heads
    return out


def _pool_size(model: nn.Module, size: Sequence[int]) -> tuple[int, int] | None:
    """The final feature map's (H, W) for ``size`` images, which the head pools (timm's ``pool_size``);
    None for a model whose levels are token sequences (a ViT, which offers ``"NLC"``: its head reads
    tokens, as timm's cfg says; Hiera, whose head reads tokens, ``head_fmt`` ``"NLC"``)."""
    if "NLC" in getattr(model, "output_fmts", ()) or getattr(model, "head_fmt", None) == "NLC":
        return None
    stride = model.feature_info[-1]["reduction"]
    return tuple(math.ceil(s / stride) for s in size)


def _has_module(model: nn.Module, name: str) -> bool:
    try:
        return model.get_submodule(name) is not None
    except AttributeError:
        return False
