"""vision_attn: attention for computer vision.

Readable ViT/DeiT models that load timm and torchvision checkpoints, built from small layers, with
tools to count FLOPs and compare models.

The public names load on first use (PEP 562), so ``import vision_attn`` (and ``vision-attn --help``)
imports neither torch nor Lightning; the error types are plain Python and are imported here.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from vision_attn.errors import CheckpointError, ConfigError, DataError, VisionAttnError

if TYPE_CHECKING:
    from vision_attn.layers.plugins import get_attention
    from vision_attn.models import build_detector, create_model, insert_attention, list_models

__version__ = "0.1.0"
__all__ = ["create_model", "build_detector", "list_models", "insert_attention", "get_attention", "VisionAttnError", "ConfigError", "DataError", "CheckpointError"]

_LAZY: dict[str, str] = {
    "create_model": "vision_attn.models",
    "build_detector": "vision_attn.models",
    "list_models": "vision_attn.models",
    "insert_attention": "vision_attn.models",
    "get_attention": "vision_attn.layers.plugins",
}
"""Each public name that loads torch, and the module it comes from."""
_SUBMODULES = frozenset({"ablation", "analysis", "cli", "commands", "data", "evaluation", "export", "integrations",
                         "io", "kernels", "layers", "losses", "models", "optimizers", "tasks"})
"""Submodules reachable as attributes after a bare ``import vision_attn`` (``vision_attn.kernels``)."""


def __getattr__(name: str) -> Any:
    """Import a public name (or a submodule) the first time it is asked for, and keep it."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the lazy ones included."""
    return sorted(set(globals()) | set(__all__) | _SUBMODULES)
