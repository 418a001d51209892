"""Attention plug-ins by name: ``get_attention("cbam", 256, reduction=8)``."""
from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable

from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers.plugins.cbam import CBAM
from vision_attn.layers.plugins.cbam_ultralytics import UltralyticsCBAM
from vision_attn.layers.plugins.checks import check_channels
from vision_attn.layers.plugins.coord import CoordAttention
from vision_attn.layers.plugins.eca import ECA
from vision_attn.layers.plugins.se import SqueezeExcite


def _no_attention(channels: int) -> nn.Module:
    """No block: the identity (a baseline that adds nothing)."""
    return nn.Identity()


ATTENTION_BLOCKS: dict[str, Callable[..., nn.Module]] = {
    "se": SqueezeExcite,
    "cbam": CBAM,
    "cbam_ultralytics": UltralyticsCBAM,
    "eca": ECA,
    "coord": CoordAttention,
    "none": _no_attention,
}
"""Name -> a class or function taking the channel count first; :func:`register_attention` adds more."""


def register_attention(name: str, factory: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """Make ``factory(channels, **kwargs)`` available as ``name`` (to :func:`get_attention`,
    ``insert_attention`` and ``create_model(attention=...)``)."""
    if name in ATTENTION_BLOCKS:
        raise ConfigError(f"attention block {name!r} is registered already")
    ATTENTION_BLOCKS[name] = factory
    return factory


def attention_factory(name: str) -> Callable[..., nn.Module]:
    """The registered class or function ``name``; an unknown name is a :class:`ConfigError` that
    suggests close matches."""
    if name not in ATTENTION_BLOCKS:
        close = difflib.get_close_matches(str(name).lower(), ATTENTION_BLOCKS, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        raise ConfigError(f"unknown attention block {name!r}: {hint}known blocks: {', '.join(ATTENTION_BLOCKS)}")
    return ATTENTION_BLOCKS[name]


def check_block_arguments(factory: Callable[..., nn.Module], label: str, kwargs: dict[str, Any]) -> None:
    """Raise a :class:`ConfigError` naming the accepted arguments unless ``factory(channels, **kwargs)``
    binds."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: let the call speak
        return
    try:
        signature.bind(1, **kwargs)
    except TypeError as e:
        accepted = [p for p in list(signature.parameters)[1:]
                    if signature.parameters[p].kind not in (inspect.Parameter.VAR_POSITIONAL,
                                                            inspect.Parameter.VAR_KEYWORD)]
        raise ConfigError(f"attention block {label}: {e}; it takes the channel count and "
                          f"{', '.join(accepted) or 'no other arguments'}") from None


def get_attention(name: str, channels: int, **kwargs: Any) -> nn.Module:
    """Build the attention block ``name`` (``se``, ``cbam``, ``cbam_ultralytics``, ``eca``,
    ``coord``, ``none``) for ``channels`` channels; ``kwargs`` go to its constructor."""
    factory = attention_factory(name)
    check_channels(channels, repr(name))
    check_block_arguments(factory, repr(name), kwargs)
    return factory(channels, **kwargs)
