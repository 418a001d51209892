"""The classifier network of a run: :func:`vision_attn.create_model` with the data's class count and
image size, as training builds it and as a trained run is rebuilt from its checkpoint."""
from __future__ import annotations

from typing import Any

from torch import nn

from vision_attn.models import create_model

__all__ = ["build_network"]


def build_network(name: str, model_kwargs: dict[str, Any] | None = None, *, attention: Any = None,
                  pretrained: str | None = None, num_classes: int, img_size: int | None) -> nn.Module:
    """``create_model`` with the data's class count and image size (unless ``model_kwargs`` sets it)."""
    kwargs = dict(model_kwargs or {})
    if img_size is not None and "img_size" not in kwargs and not name.startswith("timm:"):
        kwargs["img_size"] = img_size
    if attention is not None:
        kwargs["attention"] = attention
    return create_model(name, pretrained=pretrained, num_classes=num_classes, **kwargs)
