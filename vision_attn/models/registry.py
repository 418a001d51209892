"""The model registry: variants are small functions registered by name over configurable classes."""
from __future__ import annotations

import difflib
import fnmatch
from pathlib import Path
from typing import Callable

from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.checkpoint import load_checkpoint

_ENTRYPOINTS: dict[str, Callable[..., nn.Module]] = {}


def register_model(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """Register ``fn`` under its own name; ``fn(**kwargs)`` builds the model."""
    if fn.__name__ in _ENTRYPOINTS:
        raise ConfigError(f"model name {fn.__name__!r} is registered twice")
    _ENTRYPOINTS[fn.__name__] = fn
    return fn


def list_models(pattern: str = "*") -> list[str]:
    """Registered names matching a shell-style ``pattern`` (e.g. ``"deit_*"``), sorted."""
    return sorted(n for n in _ENTRYPOINTS if fnmatch.fnmatchcase(n, pattern))


def get_entrypoint(name: str) -> Callable[..., nn.Module]:
    if name not in _ENTRYPOINTS:
        close = difflib.get_close_matches(name, _ENTRYPOINTS, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else "run `vision-attn models` to list them"
        raise ConfigError(f"unknown model {name!r}: {hint}")
    return _ENTRYPOINTS[name]


def create_model(
    name: str,
    *,
    pretrained: str | Path | None = None,
    num_classes: int | None = None,
    img_size: int | tuple[int, int] | None = None,
    **kwargs,
) -> nn.Module:
    """Build the registered model ``name``.

    ``pretrained`` is a local checkpoint (.pth, .pt, .bin, .safetensors) in timm, torchvision,
    official or vision_attn layout; the layout is recognised from its keys. A ``num_classes`` other
    than the checkpoint's re-initialises the classifier (with a warning); an ``img_size`` other than
    the checkpoint's resamples the position embedding.
    """
    fn = get_entrypoint(name)
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    if img_size is not None:
        kwargs["img_size"] = img_size
    model = fn(**kwargs)
    if pretrained is not None:
        load_checkpoint(model, pretrained)
    return model
