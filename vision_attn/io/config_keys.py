"""The keys a training config may hold, kept between runs so that a mistyped key is named before torch
and Lightning load.

The task's parser (``vision_attn.tasks.config``) is the truth, but it needs Lightning (seconds to
import). Each time it is built its keys are written to the cache folder (``train_keys_TASK.json``) under
a fingerprint of the code (:func:`~vision_attn.io.cache.code_fingerprint`, with Lightning's and
jsonargparse's versions); :func:`unknown_key` reads them back for the same code, and the command checks
``--section.key`` arguments and the keys of each ``--config`` file with it, and a value that is a word
where a key takes only numbers, booleans or null (``--trainer.max_epochs abc``). Without keys for this code
nothing is checked here: the parser checks everything, as before. :func:`closest` is the suggestion
both give.
"""
from __future__ import annotations

import difflib
import json
from typing import Any, Iterable, Sequence

from vision_attn.io.atomic import write_json
from vision_attn.io.cache import cache_dir, code_fingerprint

__all__ = ["closest", "remember_keys", "known_keys", "unknown_key", "scalar_kinds", "wanted", "PARSER_DISTRIBUTIONS"]

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


TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
              "NoneType": "null", "dict": "a mapping", "list": "a list", "tuple": "a list"}
_SCALARS = {int: "int", float: "float", bool: "bool", type(None): "NoneType"}


def wanted(types: Sequence[str]) -> str:
    """``an integer or null``: the types a key takes, in words."""
    words = [TYPE_WORDS.get(t, t) for t in dict.fromkeys(types)]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def scalar_kinds(actions: Iterable[Any]) -> dict[str, list[str]]:
    """For each parser action whose type hint is made of int, float, bool and None only: its key and those
    types' names (``trainer.max_epochs``: ``["int", "NoneType"]``)."""
    import typing

    out = {}
    for action in actions:
        hint = getattr(action, "_typehint", None)
        args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, getattr(__import__("types"),
                                                                                     "UnionType", None)) else (hint,)
        if args and all(a in _SCALARS for a in args):
            out[action.dest] = [_SCALARS[a] for a in args]
    return out


def _path(task: str):
    return cache_dir() / f"train_keys_{task}.json"


def remember_keys(task: str, keys: Iterable[str], kinds: dict[str, list[str]] | None = None) -> None:
    """Keep ``keys`` (the parser's, for this code) and the ``kinds`` of its scalar keys (:func:`scalar_kinds`)
    for :func:`known_keys`; a cache that cannot be written is passed over."""
    record = {"fingerprint": code_fingerprint(PARSER_DISTRIBUTIONS), "keys": sorted(set(keys)), "kinds": kinds or {}}
    try:
        if json.loads(_path(task).read_text(encoding="utf-8")) == record:
            return
    except (OSError, ValueError):
        pass
    try:
        write_json(_path(task), record, mkdir=True)
    except Exception:  # noqa: BLE001 - a read-only or full cache: the parser checks the keys anyway
        pass


def _record(task: str) -> dict[str, Any] | None:
    try:
        data = json.loads(_path(task).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("fingerprint") != code_fingerprint(PARSER_DISTRIBUTIONS):
        return None
    return data if isinstance(data.get("keys"), list) and isinstance(data.get("kinds", {}), dict) else None


def known_keys(task: str) -> list[str] | None:
    """The keys :func:`remember_keys` kept for this code, or None."""
    record = _record(task)
    return None if record is None else record["keys"]


def _reads_as(text: str, kind: str) -> bool:
    """Whether a parser may read ``text`` as ``kind`` (YAML 1.1 leaves ``1e30`` a string; Python reads it)."""
    convert = {"int": int, "float": float}.get(kind)
    if convert is not None:
        try:
            convert(text.strip())
            return True
        except ValueError:
            return False
    words = {"bool": ("true", "false", "yes", "no", "on", "off"), "NoneType": ("null", "none", "~", "")}
    return text.strip().lower() in words.get(kind, ())


def _word_for_scalar(key: str, value: Any, kinds: dict[str, list[str]]) -> str | None:
    """The message for ``value`` (as YAML reads it) given to a key that takes only numbers, booleans or
    null, when it is a word; None otherwise (the parser decides)."""
    types = kinds.get(key)
    if not types or not isinstance(value, str) or any(_reads_as(value, t) for t in types):
        return None
    text = wanted(types)
    return f"config key {key!r}: {value!r} is not {text}: give {text}"


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


def _leaf_values(data: Any, prefix: str, groups: set[str]) -> Iterable[tuple[str, Any]]:
    for name, value in data.items() if isinstance(data, dict) else ():
        key = f"{prefix}{name}"
        if key in groups and isinstance(value, dict):
            yield from _leaf_values(value, key + ".", groups)
        else:
            yield key, value


def unknown_key(task: str, overrides: Sequence[str], documents: Sequence[tuple[str, Any]]) -> str | None:
    """The message for the first key the task does not know, or value it cannot take (a word for a key of
    numbers, booleans or null), in ``--section.key VALUE`` of ``overrides``, then in each ``(file, loaded
    YAML)`` of ``documents``; None when all pass or no keys are kept for this code."""
    import yaml

    record = _record(task)
    if record is None or not record["keys"]:
        return None
    keys, kinds = record["keys"], record.get("kinds", {})
    groups = {k.rsplit(".", i)[0] for k in keys for i in range(1, k.count(".") + 1)}
    leaves = set(keys) - groups  # 'model' is a group, 'model.lr' a key
    for i, arg in enumerate(overrides):
        key, eq, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        key = key.rstrip("+")  # jsonargparse's --key+=VALUE appends
        if "." not in key:  # --section.key only (not --config=FILE.yaml)
            continue
        if not _known(key, leaves, groups):
            return f"unknown option --{key}: {closest(key, keys, task)}"
        if not eq:
            value = overrides[i + 1] if i + 1 < len(overrides) and not overrides[i + 1].startswith("--") else None
        if value is not None:
            try:
                loaded = yaml.safe_load(value)
            except yaml.YAMLError:
                continue
            problem = _word_for_scalar(key, loaded, kinds)
            if problem is not None:
                return problem
    for _, data in documents:
        for key in _mapping_keys(data, "", leaves, groups):
            return f"unknown config key {key!r}: {closest(key, keys, task)}"
        for key, value in _leaf_values(data, "", groups):
            problem = _word_for_scalar(key, value, kinds)
            if problem is not None:
                return problem
    return None
