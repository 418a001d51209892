"""Our attention blocks by name in ultralytics' own YAMLs and trainer, without editing its files.

:func:`register` adds :class:`LazyAttention` subclasses to the namespace ultralytics' YAML parser
looks module names up in (``ultralytics.nn.tasks``). ultralytics passes an unknown module's arguments
unchanged and gives it no channel count, so each block is built for its input's channels on the
first forward (ultralytics runs one when it builds the model, to find its strides): a row
``[-1, 1, CBAM, []]`` works at every scale there too.

It also adds the ``Backbone`` row of vision_attn's YAMLs
(:class:`~vision_attn.models.yolo.backbone.Backbone`: a registered model through
``create_model(..., features_only=True)``, the one feature-map path of vision_attn), so that
``[-1, 1, Backbone, [swin_tiny_patch4_window7_224, {indices: [1, 2, 3]}]]`` and ultralytics' own
``[0, 1, Index, [192, 0]]`` rows (ultralytics' Index takes the channels first) build a transformer
backbone inside ultralytics. ultralytics is AGPL: it is never imported by vision_attn except inside
:func:`register`, and never a dependency.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.yolo.backbone import Backbone
from vision_attn.models.yolo.modules import MODULES

__all__ = ["LazyAttention", "register", "BLOCK_NAMES", "CLASSES", "ROWS"]


class LazyAttention(nn.Module):
    """An attention block built for its input's channels on the first forward: (B, C, H, W) -> same.

    Positional arguments are ignored when they are integers (a channel count written the ultralytics
    way, e.g. ``[256]``); one mapping gives keyword arguments (``[{reduction: 8}]``).
    """

    factory: Callable[..., nn.Module]

    def __init__(self, *args: Any) -> None:
        super().__init__()
        kwargs = [a for a in args if isinstance(a, dict)]
        if len(kwargs) > 1 or any(not isinstance(a, (int, dict)) for a in args):
            raise ConfigError(f"{type(self).__name__}: arguments {list(args)!r}: give [] or one mapping of keywords")
        self.kwargs = dict(kwargs[0]) if kwargs else {}
        self.block: nn.Module | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.block is None:
            self.block = type(self).factory(x.shape[1], **self.kwargs).to(device=x.device, dtype=x.dtype)
        return self.block(x)


def _make_classes() -> dict[str, type[LazyAttention]]:
    """One module-level class per block, so ultralytics' pickled checkpoints find them again."""
    classes = {}
    for name in BLOCK_NAMES:
        classes[name] = type(name, (LazyAttention,), {
            "factory": staticmethod(MODULES[name].factory), "__module__": __name__, "__qualname__": name,
            "__doc__": f"vision_attn's {name} row for ultralytics YAMLs (channels from the input)."})
    return classes


BLOCK_NAMES = ("CBAM", "CBAMPaper", "SE", "ECA", "CoordAtt", "TransformerBlock", "SwinBlock", "AreaAttention")
"""The names :func:`register` adds (those of vision_attn's own detector YAMLs)."""

CLASSES = _make_classes()
globals().update(CLASSES)

ROWS: dict[str, type[nn.Module]] = {**CLASSES, "Backbone": Backbone}
"""Every name :func:`register` adds: the attention blocks and the Backbone row."""


def register() -> dict[str, type[nn.Module]]:
    """Make our attention blocks and the Backbone row usable by name in ultralytics' YAMLs; returns
    name -> class.

    Calling it twice is harmless; a name that ultralytics itself defines there is left alone (a
    :class:`ConfigError` says which).
    """
    try:
        import ultralytics.nn.tasks as tasks
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ConfigError(f"ultralytics is not installed ({e}); install it to use its trainer") from None
    added: dict[str, type[nn.Module]] = {}
    for name, cls in ROWS.items():
        current = getattr(tasks, name, None)
        if current is not None and current is not cls:
            raise ConfigError(f"ultralytics already defines {name!r} in its YAML parser; not replacing it")
        setattr(tasks, name, cls)
        added[name] = cls
    return added
