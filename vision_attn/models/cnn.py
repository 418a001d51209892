"""CNN baselines for comparison runs: torchvision's ResNets by name, any timm model as ``"timm:NAME"``.

``create_model("resnet50", attention="cbam")`` builds torchvision's ResNet-50 (random weights; give
``pretrained=`` a local file) with CBAM on the residual branch of every bottleneck. torchvision's and
timm's ResNets share their state-dict keys, so either library's files load. CNNs run at any image
size: ``img_size`` only sets the size of the dry forward pass that inserts attention blocks.
"""
from __future__ import annotations

import difflib
from typing import Any

from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.registry import register_model, register_prefix

__all__ = ["torchvision_cnn", "timm_model"]


def torchvision_cnn(name: str, kwargs: dict[str, Any]) -> nn.Module:
    """torchvision's builder ``name`` without weights; ``kwargs`` go to it (``num_classes``,
    ``zero_init_residual``, ``norm_layer``, ...)."""
    import torchvision  # imported on demand, as timm is

    kwargs = dict(kwargs)
    kwargs.pop("img_size", None)
    builder = getattr(torchvision.models, name)
    try:
        model = builder(weights=None, **kwargs)
    except TypeError as e:
        raise ConfigError(f"{name}: {e}; torchvision's ResNet takes num_classes, zero_init_residual, groups, "
                          f"width_per_group, replace_stride_with_dilation and norm_layer") from None
    model.classifier_keys = ("fc.weight", "fc.bias")
    return model


def timm_model(name: str, **kwargs: Any) -> nn.Module:
    """``timm.create_model(name, pretrained=False, **kwargs)``: any timm model, never downloading.
    ``img_size`` goes to timm when the model takes one (ViTs); CNNs run at any size without it."""
    import timm  # imported on demand: it takes a second

    if not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(f'timm:{c}' for c in close)}?" if close else "see timm.list_models()"
        raise ConfigError(f"timm has no model {name!r}: {hint}")
    try:
        model = timm.create_model(name, pretrained=False, **kwargs)
    except TypeError as e:
        if "img_size" not in kwargs or "img_size" not in str(e):
            raise ConfigError(f"timm:{name}: {e}") from None
        # a CNN: it runs at any size, and img_size only sizes the dry forward that inserts attention
        kwargs.pop("img_size")
        model = timm.create_model(name, pretrained=False, **kwargs)
    classifier = model.pretrained_cfg.get("classifier") if hasattr(model, "pretrained_cfg") else None
    heads = (classifier,) if isinstance(classifier, str) else tuple(classifier or ())
    model.classifier_keys = tuple(f"{h}.{p}" for h in heads for p in ("weight", "bias"))
    return model


register_prefix("timm", timm_model)


@register_model
def resnet18(**kwargs) -> nn.Module:
    """torchvision's ResNet-18 (11.7 M parameters, BasicBlock)."""
    return torchvision_cnn("resnet18", kwargs)


@register_model
def resnet34(**kwargs) -> nn.Module:
    """torchvision's ResNet-34 (21.8 M, BasicBlock)."""
    return torchvision_cnn("resnet34", kwargs)


@register_model
def resnet50(**kwargs) -> nn.Module:
    """torchvision's ResNet-50 (25.6 M, Bottleneck)."""
    return torchvision_cnn("resnet50", kwargs)


@register_model
def resnet101(**kwargs) -> nn.Module:
    """torchvision's ResNet-101 (44.5 M, Bottleneck)."""
    return torchvision_cnn("resnet101", kwargs)


@register_model
def resnet152(**kwargs) -> nn.Module:
    """torchvision's ResNet-152 (60.2 M, Bottleneck)."""
    return torchvision_cnn("resnet152", kwargs)
