"""CNN baselines for comparison runs: torchvision's ResNets by name (with timm's model interface,
:mod:`vision_attn.models.resnet`), any timm model as ``"timm:NAME"``.

``create_model("resnet50", attention="cbam")`` builds torchvision's ResNet-50 (random weights; give
``pretrained=`` a local file) with CBAM on the residual branch of every bottleneck. torchvision's and
timm's ResNets share their state-dict keys, so either library's files load. CNNs run at any image
size: ``img_size`` only sets the size of the dry forward pass that inserts attention blocks.

The names register without importing torchvision: :mod:`vision_attn.models.resnet` (which subclasses
torchvision's ResNet, and torchvision imports torch's compiler stack: about 2.5 s) is imported when a
ResNet is first built, so that ``vision-attn models`` and ``flops`` of a Transformer start fast.
"""
from __future__ import annotations

import difflib
import importlib
from typing import TYPE_CHECKING, Any, Literal, Sequence

from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.pretrained_cfg import data_cfg
from vision_attn.models.registry import register_model, register_prefix

if TYPE_CHECKING:
    from vision_attn.models.resnet import ResNet

__all__ = ["torchvision_cnn", "timm_model"]


def torchvision_cnn(name: str, block: Literal["BasicBlock", "Bottleneck"], layers: Sequence[int],
                    kwargs: dict[str, Any]) -> ResNet:
    """torchvision's ResNet ``name`` (of ``block`` and ``layers``) without weights, with timm's
    interface (:class:`~vision_attn.models.resnet.ResNet`); ``kwargs`` go to it (``num_classes``,
    ``zero_init_residual``, ``norm_layer``, ...)."""
    resnet = importlib.import_module("vision_attn.models.resnet")  # torchvision loads here (see above)
    kwargs = dict(kwargs)
    kwargs.pop("img_size", None)
    try:
        return resnet.ResNet(getattr(resnet, block), layers, **kwargs)
    except TypeError as e:
        raise ConfigError(f"{name}: {e}; torchvision's ResNet takes num_classes, zero_init_residual, groups, "
                          f"width_per_group, replace_stride_with_dilation and norm_layer") from None


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

_CFG = data_cfg(224, crop_pct=0.95, first_conv="conv1", fixed_input_size=False, test_img_size=288,
                test_crop_pct=1.0)  # timm's default weights for these names (a1_in1k)


@register_model(cfg=_CFG)
def resnet18(**kwargs) -> ResNet:
    """torchvision's ResNet-18 (11.7 M parameters, BasicBlock)."""
    return torchvision_cnn("resnet18", "BasicBlock", (2, 2, 2, 2), kwargs)


@register_model(cfg=_CFG)
def resnet34(**kwargs) -> ResNet:
    """torchvision's ResNet-34 (21.8 M, BasicBlock)."""
    return torchvision_cnn("resnet34", "BasicBlock", (3, 4, 6, 3), kwargs)


@register_model(cfg=_CFG)
def resnet50(**kwargs) -> ResNet:
    """torchvision's ResNet-50 (25.6 M, Bottleneck)."""
    return torchvision_cnn("resnet50", "Bottleneck", (3, 4, 6, 3), kwargs)


@register_model(cfg=_CFG)
def resnet101(**kwargs) -> ResNet:
    """torchvision's ResNet-101 (44.5 M, Bottleneck)."""
    return torchvision_cnn("resnet101", "Bottleneck", (3, 4, 23, 3), kwargs)


@register_model(cfg=_CFG)
def resnet152(**kwargs) -> ResNet:
    """torchvision's ResNet-152 (60.2 M, Bottleneck)."""
    return torchvision_cnn("resnet152", "Bottleneck", (3, 8, 36, 3), kwargs)
