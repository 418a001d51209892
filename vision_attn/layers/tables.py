"""Constant tables a layer derives from its configuration and the input's size (position indices,
region masks, sine-cosine and rotary tables), built once per key and kept outside the state dict."""
from __future__ import annotations

from typing import Callable, Hashable, TypeVar

import torch

from vision_attn.kernels import tracing

__all__ = ["Tables"]

T = TypeVar("T")


class Tables:
    """Tables built by ``build()`` on the first :meth:`get` of their key and kept in a plain dict (not
    buffers: never saved in a state dict, never moved by ``.to``; a key names its device and dtype).

    They are built as normal tensors even under ``torch.inference_mode``, so that a later pass that
    records gradients can use them. While a model is compiled, traced or exported (or one of the
    ``values`` passed to :meth:`get` is a torch.fx proxy) they are built in the graph every time.
    """

    def __init__(self) -> None:
        self._tables: dict[Hashable, object] = {}

    def get(self, key: Hashable, build: Callable[[], T], *values: object) -> T:
        if tracing(*values):
            return build()
        if key not in self._tables:
            with torch.inference_mode(False):
                self._tables[key] = build()
        return self._tables[key]  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self._tables)

    def clear(self) -> None:
        self._tables.clear()
