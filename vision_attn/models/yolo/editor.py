"""Editing a detector YAML file's text: insert attention rows (or take them out) with every ``from``
re-indexed, changing nothing else in the file, comments and layout included.

Rows must be written one per line in flow style (``  - [-1, 1, Conv, [64, 3, 2]] # 0``), as
ultralytics and the shipped configs write them. Only the ``from`` field of a row whose inputs moved
is rewritten; a comment that starts with the row's index (``# 12`` or ``# 5-P4/16``) is renumbered.
Every edit is verified: the edited text must load to :func:`insert_row`'s rows, and
:func:`check_topology` must find the old graph plus the new nodes.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
import yaml

from vision_attn.errors import ConfigError
from vision_attn.io.atomic import write_text
from vision_attn.io.yaml import DETECTOR_LIMITS, load_yaml, read_yaml_text
from vision_attn.models.yolo.builder import build_detector
from vision_attn.models.yolo.modules import MODULES
from vision_attn.models.yolo.reindex import all_rows, check_topology, insert_row, remove_row
from vision_attn.models.yolo.remap import insertion_map

__all__ = ["EditResult", "insert_attention_text", "insert_attention_file", "insert_attention_data",
           "remove_rows_text", "remove_attention_text", "check_builds", "attention_row_module"]

_ROW = re.compile(r"^(?P<lead>\s*-\s*\[\s*)(?P<from>\[[^\]\[]*\]|-?\d+)(?P<rest>\s*,.*?)(?P<comment>\s*#\s*(?P<num>\d+)(?P<tail>.*))?$")


@dataclass
class EditResult:
    """The edited text, the new indices of inserted rows, the old -> new row map and the old indices of
    removed rows."""

    text: str
    inserted: list[int] = field(default_factory=list)
    index_map: dict[int, int] = field(default_factory=dict)
    removed: list[int] = field(default_factory=list)


def _load(text: str, source: str) -> Any:
    """The detector YAML ``text`` within the reader's bounds (no anchors or aliases)."""
    return load_yaml(text, source, DETECTOR_LIMITS)


def check_builds(text: str, source: str = "<yaml text>", *, stage: str = "input") -> None:
    """Build ``text`` at every scale it defines (on the meta device: no memory, no compute) and raise
    a :class:`ConfigError` naming ``source``, the stage (``input`` or ``output`` of an edit) and the
    scale when one does not build, so that an edit is never written from or to a broken YAML."""
    data = _load(text, source)
    scales = list((data.get("scales") or {}) if isinstance(data, dict) else {}) or [None]
    for scale in scales:
        try:
            with torch.device("meta"):
                build_detector(data, scale=scale)
        except ConfigError as e:
            at = f" at scale {scale}" if scale else ""
            raise ConfigError(f"{source}: the {stage} YAML does not build{at} ({e}); nothing was written") from None


def _row_lines(text: str, source: str = "<yaml text>") -> tuple[list[str], list[int], dict[str, Any]]:
    """The file's lines, the line number of each row in order, and the loaded data."""
    data = _load(text, source)
    if not isinstance(data, dict):
        raise ConfigError("the YAML must be a mapping with 'backbone' and 'head' lists")
    lines = text.splitlines(keepends=True)
    found: list[int] = []
    section, indent = None, None
    for n, line in enumerate(lines):
        key = re.match(r"^([A-Za-z_]\w*)\s*:", line)
        if key:
            section, indent = key.group(1), None
            continue
        item = re.match(r"^(\s*)-", line)
        if section not in ("backbone", "head") or item is None:
            continue
        indent = item.group(1) if indent is None else indent  # the items of the section's list
        if item.group(1) == indent and _ROW.match(line.rstrip("\r\n")):
            found.append(n)
    if len(found) != len(all_rows(data)):
        raise ConfigError(f"found {len(found)} one-line rows but the YAML has {len(all_rows(data))}: write each row "
                          "on one line in flow style, e.g. '  - [-1, 1, Conv, [64, 3, 2]] # 0'")
    return lines, found, data


def _from_text(value: Any) -> str:
    return f"[{', '.join(str(v) for v in value)}]" if isinstance(value, list) else str(value)


def _rewrite_line(line: str, old_index: int, new_index: int, old_from: Any, new_from: Any) -> str:
    end = line[len(line.rstrip("\r\n")):]
    m = _ROW.match(line.rstrip("\r\n"))
    assert m is not None
    frm = m.group("from") if new_from == old_from else _from_text(new_from)
    comment = m.group("comment") or ""
    if m.group("num") is not None and int(m.group("num")) == old_index and new_index != old_index:
        start = m.start("num") - m.start("comment")
        comment = comment[:start] + str(new_index) + m.group("tail")
    return m.group("lead") + frm + m.group("rest") + comment + end


def _rewrite(text: str, lines: list[str], rows_at: list[int], old: dict[str, Any], new: dict[str, Any],
             mapping: dict[int, int], new_lines: dict[int, str]) -> str:
    old_rows, new_rows = all_rows(old), all_rows(new)
    out: list[str] = []
    row_of_line = {n: i for i, n in enumerate(rows_at)}
    for n, line in enumerate(lines):
        i = row_of_line.get(n)
        if i is None:
            out.append(line)
            continue
        if i in mapping:
            j = mapping[i]
            out.append(_rewrite_line(line, i, j, old_rows[i][0], new_rows[j][0]))
        if i in new_lines:
            if not out[-1].endswith("\n"):
                out[-1] += "\n"
            out.append(new_lines[i])
    return "".join(out)


def _verify(text: str, expected: dict[str, Any]) -> None:
    loaded = _load(text, "<edited yaml text>")
    if loaded.get("backbone") != expected.get("backbone") or loaded.get("head") != expected.get("head"):
        raise ConfigError("the edited text does not load to the re-indexed rows (an unusual row layout?); "
                          "nothing was written")


def attention_row_module(block: str) -> str:
    """An attention module name of the registry (case-insensitive), or a ConfigError with suggestions."""
    names = [k for k, v in MODULES.items() if v.kind == "attention"]
    if block in names:
        return block
    folded = {k.lower(): k for k in names}
    if str(block).lower() in folded:
        return folded[str(block).lower()]
    close = difflib.get_close_matches(str(block), names, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]}? " if close else ""
    raise ConfigError(f"--block {block!r}: not an attention block; {hint}use one of {', '.join(names)}")


def _positions(data: dict[str, Any], block: str, after: str | None, at: Sequence[int] | None,
               section: str) -> list[int]:
    """Rows to insert ``block`` after (rows already followed by ``block`` left out)."""
    if section not in ("backbone", "head", "all"):
        raise ConfigError(f"--section {section!r}: use backbone, head or all")
    rows = all_rows(data)
    n_backbone = len(data.get("backbone") or [])
    if at is not None:
        positions = sorted(set(int(k) for k in at))
        bad = [k for k in positions if not 0 <= k < len(rows) - 1]
        if bad:
            raise ConfigError(f"--at {bad[0]}: rows 0..{len(rows) - 2} can take a block after them")
    elif after is not None:
        span = {"backbone": range(0, n_backbone), "head": range(n_backbone, len(rows)),
                "all": range(0, len(rows))}[section]
        positions = [k for k in span if rows[k][2] == after and k < len(rows) - 1]
        if not positions:
            present = list(dict.fromkeys(str(rows[k][2]) for k in span if k < len(rows) - 1))
            close = difflib.get_close_matches(str(after), present, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ConfigError(f"--after {after!r}: no row of that module in the {'YAML' if section == 'all' else section}; {hint}"
                              f"candidates: {', '.join(present)}")
    else:
        raise ConfigError("say where: --after MODULE or --at ROW,ROW")
    return [k for k in positions if not (rows[k + 1][2] == block and rows[k + 1][0] == -1)]


def insert_attention_data(data: dict[str, Any], block: str, *, after: str | None = None,
                          at: Sequence[int] | None = None, section: str = "backbone",
                          args: list[Any] | None = None) -> tuple[dict[str, Any], list[int], dict[int, int]]:
    """:func:`insert_attention_text` on loaded data (``yaml.safe_load``'s dict): the edited copy, the new
    indices of the inserted rows and the old -> new row map. ``data`` is not changed."""
    if not isinstance(data, dict):
        raise ConfigError("the YAML must be a mapping with 'backbone' and 'head' lists")
    block = attention_row_module(block)
    return _insert_rows(data, block, _positions(data, block, after, at, section), args)


def _insert_rows(data: dict[str, Any], block: str, positions: list[int],
                 args: list[Any] | None) -> tuple[dict[str, Any], list[int], dict[int, int]]:
    """Insert ``[-1, 1, block, args]`` after each row in ``positions`` (ascending) and check the
    topology: the edited copy, the new indices of the inserted rows and the old -> new row map."""
    new = data
    for k in sorted(positions, reverse=True):
        new = insert_row(new, k, block, args)
    inserted = [k + 1 + positions.index(k) for k in positions]
    check_topology(data, new, inserted)
    return new, inserted, insertion_map(len(all_rows(data)), inserted)


def insert_attention_text(text: str, block: str, *, after: str | None = None, at: Sequence[int] | None = None,
                          section: str = "backbone", args: list[Any] | None = None,
                          source: str = "<yaml text>") -> EditResult:
    """Insert ``[-1, 1, block, args]`` after every row of module ``after`` in ``section`` (backbone,
    head or all), or after the rows ``at``. A position already followed by ``block`` is skipped, so
    running the edit twice inserts once. ``source`` names the text in error messages."""
    block = attention_row_module(block)
    if section not in ("backbone", "head", "all"):
        raise ConfigError(f"--section {section!r}: use backbone, head or all")
    lines, rows_at, data = _row_lines(text, source)
    positions = _positions(data, block, after, at, section)
    new, inserted, mapping = _insert_rows(data, block, positions, args)
    args_text = yaml.safe_dump(list(args or []), default_flow_style=True).strip()
    new_lines = {}
    for k in positions:
        lead = re.match(r"^\s*-\s*", lines[rows_at[k]]).group(0)
        new_lines[k] = f"{lead}[-1, 1, {block}, {args_text}] # {mapping[k] + 1}\n"
    edited = _rewrite(text, lines, rows_at, data, new, mapping, new_lines)
    _verify(edited, new)
    return EditResult(edited, inserted, mapping)


def remove_rows_text(text: str, block: str, source: str = "<yaml text>") -> EditResult:
    """Take out every single-input row of module ``block`` (what :func:`insert_attention_text` added),
    re-indexing the rest."""
    lines, rows_at, data = _row_lines(text, source)
    rows = all_rows(data)
    drop = [i for i, r in enumerate(rows) if r[2] == block]
    new = data
    for i in sorted(drop, reverse=True):
        new = remove_row(new, i)
    check_topology(new, data, drop)
    kept = [i for i in range(len(rows)) if i not in set(drop)]
    mapping = {old: n for n, old in enumerate(kept)}
    dropped_lines = {rows_at[i] for i in drop}
    text_kept = "".join(line for n, line in enumerate(lines) if n not in dropped_lines)
    lines2, rows_at2, _ = _row_lines(text_kept)
    # rows of the kept text are numbered as in the old file: rewrite their `from` and index comments
    out_text = _rewrite(text_kept, lines2, rows_at2, {"backbone": [rows[i] for i in kept], "head": []},
                        {"backbone": all_rows(new), "head": []}, {n: n for n in range(len(kept))}, {})
    # index comments: renumber old indices to new ones
    result_lines = out_text.splitlines(keepends=True)
    _, rows_at3, _ = _row_lines(out_text)
    for n, line_no in enumerate(rows_at3):
        old_index = kept[n]
        result_lines[line_no] = _rewrite_line(result_lines[line_no], old_index, n, None, None)
    edited = "".join(result_lines)
    _verify(edited, new)
    return EditResult(edited, [], mapping, drop)


def insert_attention_file(src: str | Path, dst: str | Path, block: str, *, after: str | None = None,
                          at: Sequence[int] | None = None, section: str = "backbone",
                          args: list[Any] | None = None) -> EditResult:
    """:func:`insert_attention_text` on the file ``src``, written to ``dst`` only once both the input
    and the edited YAML build at every scale (:func:`check_builds`).
    ``result.index_map`` moves a checkpoint's weights: ``remap_state_dict(state, result.index_map)``."""
    source = Path(src)
    if not source.is_file():
        raise ConfigError(f"{source}: no such YAML file")
    text = read_yaml_text(source, DETECTOR_LIMITS, what="detector YAML")
    check_builds(text, str(source))
    result = insert_attention_text(text, block, after=after, at=at, section=section, args=args, source=str(source))
    check_builds(result.text, str(dst), stage="output")
    write_text(dst, result.text)
    return result


def remove_attention_text(text: str, block: str | None = None, source: str = "<yaml text>") -> EditResult:
    """Take out the rows of attention ``block`` (every attention block when None), re-indexing the rest;
    ``index_map`` maps old rows that stay to their new indices."""
    names = [attention_row_module(block)] if block is not None else \
        [k for k, v in MODULES.items() if v.kind == "attention"]
    data = _load(text, source)
    present = {str(r[2]) for r in all_rows(data)} if isinstance(data, dict) else set()
    n_old = len(all_rows(data)) if isinstance(data, dict) else 0
    mapping = {i: i for i in range(n_old)}
    for name in names:
        if name not in present:
            continue
        result = remove_rows_text(text, name, source)
        text = result.text
        mapping = {old: result.index_map[new] for old, new in mapping.items() if new in result.index_map}
    return EditResult(text, [], mapping, [i for i in range(n_old) if i not in mapping])
