"""What each registered name expects of its input images: size, resize-and-crop, interpolation,
mean and std; timm's ``pretrained_cfg``.

Every registered variant names its configuration (``@register_model(cfg=...)``), and
:func:`~vision_attn.models.registry.create_model` puts it on the model as ``pretrained_cfg`` (and
``default_cfg``), a dict with timm's keys, so that ``timm.data.resolve_model_data_config(model)`` and
``timm.data.create_transform`` configure themselves from our models. Under timm's names the values
are those of timm's default weights for the name; under torchvision's names those of torchvision's
``IMAGENET1K_V1`` weights (``crop_pct`` = crop / resize, e.g. 224 / 256). ``input_size`` follows a
model built at another ``img_size``; ``num_classes`` and ``classifier`` follow the model.
"""
from __future__ import annotations

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
             first_conv: str = "patch_embed.proj") -> dict[str, Any]:
    """A name's input configuration: square ``img_size`` images, resized to ``img_size / crop_pct``
    and centre-cropped, with ``interpolation``, normalised by ``mean`` and ``std``; ``first_conv`` is
    the layer that reads the image (timm adapts it to other channel counts)."""
    return dict(input_size=(3, img_size, img_size), interpolation=interpolation, crop_pct=crop_pct,
                crop_mode="center", mean=tuple(mean), std=tuple(std), first_conv=first_conv)


def model_cfg(name: str, cfg: dict[str, Any], model: nn.Module, img_size: int | tuple[int, int] | None) -> dict[str, Any]:
    """``cfg`` of the name ``name`` as built: its architecture name, the model's classes and classifier,
    and ``img_size`` (where given) as the input size."""
    out = dict(cfg, architecture=name)
    in_chans = model.get_submodule(out["first_conv"]).in_channels
    size = to_2tuple(img_size) if img_size is not None else out["input_size"][1:]
    out["input_size"] = (in_chans, *size)
    out["num_classes"] = getattr(model, "num_classes", None)
    keys = getattr(model, "classifier_keys", ())
    heads = tuple(h for h in dict.fromkeys(k.rsplit(".", 1)[0] for k in keys) if _has_module(model, h))
    out["classifier"] = heads[0] if len(heads) == 1 else heads
    return out


def _has_module(model: nn.Module, name: str) -> bool:
    try:
        return model.get_submodule(name) is not None
    except AttributeError:
        return False
