"""Constant tables a layer derives from its configuration and the input's size (position indices,
region masks, sine-cosine and rotary tables), kept outside the state dict."""
from __future__ import annotations

from typing import Callable, Hashable, TypeVar

__all__ = ["Tables"]

T = TypeVar("T")


class Tables:
    """A layer's tables by key: :meth:`get` builds one with ``build()`` on every call, so that every
    graph (traced, exported, compiled) holds what the eager model computes. Nothing of it is in the
    state dict. Keeping them between calls is a fast path applied from outside
    (:func:`vision_attn.kernels.accelerate`): a subclass that overrides :meth:`get`. ``values``: the
    tensors the table derives from (a cache must build afresh while they are traced)."""

    def get(self, key: Hashable, build: Callable[[], T], *values: object) -> T:
        return build()
