"""``insert_attention``: attention blocks into an ``nn.Module`` (:mod:`vision_attn.models.insertion`) or
rows into a detector YAML (:mod:`vision_attn.models.yolo.editor`), by what it is given."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.insertion import (Insertion, InsertionReport, Selector, default_attention_sites,
                                          insert_into_module, select_modules)
from vision_attn.models.yolo.editor import insert_attention_data, insert_attention_text

__all__ = ["insert_attention", "Insertion", "InsertionReport", "select_modules", "default_attention_sites"]


def _insert_into_yaml(source: Any, block: Any, after: Any, block_kwargs: dict[str, Any]) -> Any:
    """The YAML branch of :func:`insert_attention`: a file path gives the edited text, a dict the edited dict."""
    at, section = block_kwargs.pop("at", None), block_kwargs.pop("section", "backbone")
    args = block_kwargs.pop("args", None)
    if block_kwargs:  # keyword arguments of the block: one mapping, as a YAML row writes them
        args = list(args or []) + [dict(block_kwargs)]
    if not isinstance(block, str):
        raise ConfigError(f"block={block!r}: a YAML row takes a module name such as 'CBAM' or 'SE'")
    after = None if after is None else str(after)
    if isinstance(source, dict):
        return insert_attention_data(source, block, after=after, at=at, section=section, args=args)[0]
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"{path}: no such YAML file (insert_attention takes an nn.Module, or a YAML file path "
                          f"or dict)")
    return insert_attention_text(path.read_text(encoding="utf-8"), block, after=after, at=at, section=section,
                                 args=args).text


def insert_attention(
    model: nn.Module | str | os.PathLike | dict[str, Any],
    block: str | Callable[..., nn.Module],
    *,
    after: Selector,
    position: Literal["after", "residual"] = "after",
    zero_init: bool = False,
    input_size: int | Sequence[int] | None = None,
    **block_kwargs: Any,
) -> InsertionReport | str | dict[str, Any]:
    """Insert an attention ``block`` at every module of ``model`` that ``after`` selects; in place
    (:func:`vision_attn.models.insertion.insert_into_module`, which documents ``block``, ``after``,
    ``position``, ``zero_init`` and ``input_size``).

    A detector YAML instead of a model (a ``.yaml``/``.yml`` path or ``yaml.safe_load``'s dict) is
    edited row by row (:func:`vision_attn.models.yolo.insert_attention_text`): ``block`` is a row
    module (``"CBAM"``, ``"SE"``, ...; case-insensitive), ``after`` a module name, and ``section=``,
    ``at=`` and ``args=`` are the editor's (other keyword arguments become the row's argument mapping).
    A path returns the edited YAML text (the file is not written); a dict returns the edited dict.
    """
    if isinstance(model, dict) or (isinstance(model, (str, os.PathLike))
                                   and str(model).lower().endswith((".yaml", ".yml"))):
        return _insert_into_yaml(model, block, after, dict(block_kwargs))
    return insert_into_module(model, block, after=after, position=position, zero_init=zero_init,
                              input_size=input_size, **block_kwargs)
