"""The keys a training config may hold, kept between runs so that a mistyped key is named before torch
and Lightning load.

The task's parser (``vision_attn.tasks.config``) is the truth, but it needs Lightning (seconds to
import). Each time it is built its keys are written to the cache folder (``train_keys_TASK.json``) under
a fingerprint of the code (:func:`~vision_attn.io.cache.code_fingerprint`, with Lightning's and
jsonargparse's versions); :func:`unknown_key` reads them back for the same code, and the command checks
``--section.key`` arguments and the keys of each ``--config`` file with it. Without keys for this code
nothing is checked here: the parser checks everything, as before. :func:`closest` is the suggestion
both give.
"""
from __future__ import annotations

import difflib
import json
from typing import Any, Iterable, Sequence

from vision_attn.io.atomic import write_json
from vision_attn.io.cache import cache_dir, code_fingerprint

__all__ = ["closest", "remember_keys", "known_keys", "unknown_key", "PARSER_DISTRIBUTIONS"]

PARSER_DISTRIBUTIONS = ("pytorch-lightning", "jsonargparse")
"""What the keys depend on besides vision_attn's code."""


def closest(key: str, keys: Sequence[str], task: str = "cls") -> str:
    """``did you mean KEY?`` for the known key closest to ``key``, else where to find the keys."""
    key = key.lstrip("-").replace("-", "_")
    section = key.rsplit(".", 1)[0] if "." in key else ""
    pool = [k for k in keys if k.startswith(section + ".")] if section else list(keys)
    close = difflib.get_close_matches(key, pool or keys, n=1, cutoff=0.6)
    if not close:  # compare the last part only: 'trainer.max_epoch' -> 'trainer.max_epochs'
        tails = {k.rsplit(".", 1)[-1]: k for k in pool or keys}
        hit = difflib.get_close_matches(key.rsplit(".", 1)[-1], tails, n=1, cutoff=0.75)
        close = [tails[hit[0]]] if hit else []
    return f"did you mean {close[0]}?" if close else f"run `vision-attn train {task} --help` for the keys"


def _path(task: str):
    return cache_dir() / f"train_keys_{task}.json"


def remember_keys(task: str, keys: Iterable[str]) -> None:
    """Keep ``keys`` (the parser's, for this code) for :func:`known_keys`; a cache that cannot be written is
    passed over."""
    keys = sorted(set(keys))
    fingerprint = code_fingerprint(PARSER_DISTRIBUTIONS)
    try:
        data = json.loads(_path(task).read_text(encoding="utf-8"))
        if data.get("fingerprint") == fingerprint and data.get("keys") == keys:
            return
    except (OSError, ValueError, AttributeError):
        pass
    try:
        write_json(_path(task), {"fingerprint": fingerprint, "keys": keys}, mkdir=True)
    except Exception:  # noqa: BLE001 - a read-only or full cache: the parser checks the keys anyway
        pass


def known_keys(task: str) -> list[str] | None:
    """The keys :func:`remember_keys` kept for this code, or None."""
    try:
        data = json.loads(_path(task).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("fingerprint") != code_fingerprint(PARSER_DISTRIBUTIONS):
        return None
    keys = data.get("keys")
    return keys if isinstance(keys, list) else None


def _known(key: str, leaves: set[str], groups: set[str]) -> bool:
    """``key`` is a key, a group of keys, or lies inside a key's value (``model.model_kwargs.depth``)."""
    parts = key.split(".")
    return key in groups or any(".".join(parts[:i]) in leaves for i in range(1, len(parts) + 1))


def _mapping_keys(data: Any, prefix: str, leaves: set[str], groups: set[str]) -> Iterable[str]:
    """The dotted keys of a loaded YAML mapping that the task does not know."""
    for name, value in data.items() if isinstance(data, dict) else ():
        if not isinstance(name, str) or (not prefix and name == "config"):
            continue
        key = f"{prefix}{name}"
        if key in groups:
            if isinstance(value, dict):
                yield from _mapping_keys(value, key + ".", leaves, groups)
        elif not _known(key, leaves, groups):
            yield key


def unknown_key(task: str, overrides: Sequence[str], documents: Sequence[tuple[str, Any]]) -> str | None:
    """The message for the first key the task does not know (``--section.key`` of ``overrides``, then
    each ``(file, loaded YAML)`` of ``documents``), or None (all known, or no keys kept for this code)."""
    keys = known_keys(task)
    if not keys:
        return None
    groups = {k.rsplit(".", i)[0] for k in keys for i in range(1, k.count(".") + 1)}
    leaves = set(keys) - groups  # 'model' is a group, 'model.lr' a key
    for arg in overrides:
        key = arg[2:].partition("=")[0] if arg.startswith("--") else ""
        if "." in key and not _known(key, leaves, groups):  # --section.key (not --config=FILE.yaml)
            return f"unknown option --{key}: {closest(key, keys, task)}"
    for _, data in documents:
        for key in _mapping_keys(data, "", leaves, groups):
            return f"unknown config key {key!r}: {closest(key, keys, task)}"
    return None
