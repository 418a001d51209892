"""Inserting and removing rows of a detector YAML with every ``from`` re-indexed.

These work on the plain data (``yaml.safe_load``'s dict); a row inserted after row ``k`` takes row
``k``'s output, and every later reference to row ``k`` (skip connections and Detect included) then
takes the new row's output, so the block sits on the whole path out of row ``k``. :func:`check_topology`
proves an edit: the new graph with the inserted rows contracted is the old graph.
"""
from __future__ import annotations

import copy
from typing import Any, Mapping

from vision_attn.errors import ConfigError

__all__ = ["all_rows", "insert_row", "remove_row", "absolute_inputs", "check_topology"]


def all_rows(data: Mapping[str, Any]) -> list[list[Any]]:
    """backbone + head as one list (the rows' indices are their positions)."""
    return list(data.get("backbone") or []) + list(data.get("head") or [])


def _targets(f: Any, index: int) -> list[int]:
    return [index + x if x < 0 else x for x in (f if isinstance(f, list) else [f])]


def absolute_inputs(data: Mapping[str, Any]) -> list[list[int]]:
    """Each row's inputs as absolute indices (-1: the image)."""
    return [_targets(r[0], i) for i, r in enumerate(all_rows(data))]


def _rewrite(f: Any, old_index: int, new_index: int, mapping: dict[int, int]) -> Any:
    """``from`` of a row moved from old_index to new_index, its targets moved by ``mapping``: relative
    entries stay relative, absolute stay absolute."""
    def one(x: int) -> int:
        target = old_index + x if x < 0 else x
        moved = mapping.get(target, target)
        return moved - new_index if x < 0 else moved
    return [one(x) for x in f] if isinstance(f, list) else one(f)


def _split(data: dict[str, Any], rows: list[list[Any]], n_backbone: int) -> dict[str, Any]:
    out = copy.deepcopy(data)
    out["backbone"], out["head"] = rows[:n_backbone], rows[n_backbone:]
    return out


def insert_row(data: Mapping[str, Any], after: int, module: str, args: list[Any] | None = None) -> dict[str, Any]:
    """A copy of ``data`` with ``[-1, 1, module, args]`` inserted after row ``after`` (in the same
    section as row ``after``), every later ``from`` re-indexed."""
    rows = copy.deepcopy(all_rows(data))
    if not 0 <= after < len(rows):
        raise ConfigError(f"insert after row {after}: out of range, the YAML has rows 0..{len(rows) - 1}")
    at = after + 1
    mapping = {t: t + 1 for t in range(at, len(rows))}
    mapping[after] = at  # later readers of row `after` read the new row
    new_rows = rows[:at] + [[-1, 1, module, list(args or [])]]
    for j in range(at, len(rows)):
        f, n, m, a = rows[j]
        new_rows.append([_rewrite(f, j, j + 1, mapping), n, m, a])
    n_backbone = len(data.get("backbone") or []) + (1 if after < len(data.get("backbone") or []) else 0)
    return _split(dict(data), new_rows, n_backbone)


def remove_row(data: Mapping[str, Any], index: int) -> dict[str, Any]:
    """A copy of ``data`` without row ``index`` (a single-input row: its readers read its input)."""
    rows = copy.deepcopy(all_rows(data))
    if not 0 < index < len(rows):
        raise ConfigError(f"remove row {index}: out of range, the YAML has rows 1..{len(rows) - 1} to remove")
    targets = _targets(rows[index][0], index)
    if len(targets) != 1:
        raise ConfigError(f"remove row {index}: it takes several inputs; only single-input rows can be removed")
    source = targets[0]
    mapping = {t: t - 1 for t in range(index + 1, len(rows))}
    mapping[index] = source
    new_rows = rows[:index]
    for j in range(index + 1, len(rows)):
        f, n, m, a = rows[j]
        new_rows.append([_rewrite(f, j, j - 1, mapping), n, m, a])
    n_backbone = len(data.get("backbone") or []) - (1 if index < len(data.get("backbone") or []) else 0)
    return _split(dict(data), new_rows, n_backbone)


def check_topology(old: Mapping[str, Any], new: Mapping[str, Any], inserted: list[int]) -> None:
    """Raise :class:`ConfigError` unless ``new`` is ``old`` plus single-input rows at ``inserted``
    (new indices): contracting each inserted row into its input must give the old rows and edges."""
    new_rows, old_rows = all_rows(new), all_rows(old)
    new_inputs = absolute_inputs(new)
    inserted_set = set(inserted)
    for k in inserted:
        if len(new_inputs[k]) != 1:
            raise ConfigError(f"topology check: inserted row {k} must take exactly one input")

    def resolve(t: int) -> int:
        while t in inserted_set:
            t = new_inputs[t][0]
        return t
    kept = [i for i in range(len(new_rows)) if i not in inserted_set]
    old_of = {new: old for old, new in enumerate(kept)}
    if len(kept) != len(old_rows):
        raise ConfigError(f"topology check: {len(kept)} original rows after the edit, {len(old_rows)} before")
    old_inputs = absolute_inputs(old)
    for i in kept:
        o = old_of[i]
        if new_rows[i][1:] != old_rows[o][1:]:
            raise ConfigError(f"topology check: row {i} (was {o}) changed: {old_rows[o]} -> {new_rows[i]}")
        got = [-1 if t == -1 else old_of[resolve(t)] for t in new_inputs[i]]
        if got != old_inputs[o]:
            raise ConfigError(f"topology check: row {i} (was {o}) reads rows {got} instead of {old_inputs[o]}: "
                              "a 'from' index was not re-indexed")
