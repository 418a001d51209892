"""One bounded, safe reader for every YAML the project opens.

``yaml.safe_load`` runs no code, but a small file can still take a machine down: anchors and aliases
nested a few levels deep (``b: [*a, *a, ...]``, ``c: [*b, *b, ...]``) describe a billion nodes in
4 KB. PyYAML builds such a document as shared references, so loading is quick, but everything that
walks the result afterwards (schema checks, jsonargparse, copying, dumping) expands it. Here the
document's events are scanned before anything is built, and the reader stops at the first bound it
crosses: file size, nesting depth, the number of nodes once every alias is expanded, the length of a
scalar. The limits lie far above any real configuration (ultralytics' largest detector YAML is under
4 KB, depth 4, a few hundred nodes).

Detector YAMLs refuse anchors and aliases outright (no ultralytics file has one, and the editor
rewrites rows line by line); training configs and data YAMLs may use them within the bounds.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from vision_attn.errors import ConfigError

__all__ = ["YamlLimits", "CONFIG_LIMITS", "DETECTOR_LIMITS", "check_yaml", "check_file_size", "load_yaml",
           "read_yaml_text", "read_yaml"]

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class YamlLimits:
    """Bounds checked before a YAML document is built."""

    max_bytes: int = 1 << 20          # 1 MiB on disk
    max_depth: int = 64               # nested mappings and sequences
    max_nodes: int = 1_000_000        # scalars and collections, every alias expanded
    max_scalar: int = 1 << 16         # characters in one scalar
    aliases: bool = True              # whether anchors (&a) and aliases (*a) may appear


CONFIG_LIMITS = YamlLimits()
DETECTOR_LIMITS = replace(CONFIG_LIMITS, aliases=False)


def _fail(source: str, mark: Any, message: str) -> ConfigError:
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return ConfigError(f"{source}: {where}{message}; nothing was built or written")


_CHARACTER_NAMES = {"\t": "a tab", "\r": "a carriage return", "\x00": "a NUL byte", "\ufeff": "a byte-order mark"}


def _character_at(text: str | None, mark: Any) -> str | None:
    """The character of ``text`` at ``mark`` (PyYAML's C parser reports where, not what), named."""
    if text is None or mark is None:
        return None
    lines = text.split("\n")
    if not 0 <= mark.line < len(lines) or not 0 <= mark.column < len(lines[mark.line]):
        return None
    char = lines[mark.line][mark.column]
    return f"{_CHARACTER_NAMES[char]} ({char!r})" if char in _CHARACTER_NAMES else repr(char)


def check_yaml(text: str, source: str = "<yaml text>", limits: YamlLimits = CONFIG_LIMITS) -> None:
    """Raise a :class:`ConfigError` naming ``source``, the line and the limit when ``text`` crosses one
    of ``limits``; scans the parser's events only, so nothing is built and no alias is expanded."""
    size = len(text)  # characters: at most the bytes, so only a text near the limit is encoded to count
    if size <= limits.max_bytes < 4 * size:
        size = len(text.encode("utf-8"))
    if size > limits.max_bytes:
        raise _fail(source, None, f"{size:,} bytes is over the limit of {limits.max_bytes:,} bytes for a YAML file")
    sizes: dict[str, int] = {}          # anchor -> nodes of its value, aliases expanded
    stack: list[list[Any]] = []         # open collections: [anchor, nodes so far]
    total = 0
    try:
        for event in yaml.parse(text, Loader=_LOADER):
            kind = type(event)
            if kind in (yaml.MappingStartEvent, yaml.SequenceStartEvent):
                if event.anchor is not None and not limits.aliases:
                    raise _fail(source, event.start_mark, f"anchor &{event.anchor}: anchors and aliases are not "
                                "allowed in a detector YAML; write each row out in full")
                if len(stack) >= limits.max_depth:
                    raise _fail(source, event.start_mark, f"nesting deeper than the limit of {limits.max_depth} levels")
                stack.append([event.anchor, 1])
                total += 1
                continue
            if kind in (yaml.MappingEndEvent, yaml.SequenceEndEvent):
                anchor, nodes = stack.pop()  # its nodes are in ``total`` already
                if anchor is not None:
                    sizes[anchor] = nodes
                if stack:
                    stack[-1][1] += nodes
                continue
            if kind is yaml.ScalarEvent:
                if len(event.value) > limits.max_scalar:
                    raise _fail(source, event.start_mark, f"a scalar of {len(event.value):,} characters is over the "
                                f"limit of {limits.max_scalar:,}")
                if event.anchor is not None:
                    if not limits.aliases:
                        raise _fail(source, event.start_mark, f"anchor &{event.anchor}: anchors and aliases are "
                                    "not allowed in a detector YAML; write each row out in full")
                    sizes[event.anchor] = 1
                nodes = 1
            elif kind is yaml.AliasEvent:
                if not limits.aliases:
                    raise _fail(source, event.start_mark, f"alias *{event.anchor}: anchors and aliases are not "
                                "allowed in a detector YAML; write each row out in full")
                nodes = sizes.get(event.anchor, 1)
            else:  # stream and document events
                continue
            if stack:
                stack[-1][1] += nodes
            total += nodes
            if total > limits.max_nodes:
                raise _fail(source, event.start_mark, f"the document expands to more than {limits.max_nodes:,} "
                            "nodes (aliases expanded): an alias bomb or a file far larger than any configuration")
    except yaml.YAMLError as e:
        raise _yaml_error(source, e, limits, text) from None


def _yaml_error(source: str, e: yaml.YAMLError, limits: YamlLimits, text: str | None = None) -> ConfigError:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or " ".join(str(e).split())
    if "nesting depth" in problem:  # libyaml's own bound (1,000) met before the events reach ours
        return _fail(source, mark, f"nesting deeper than the limit of {limits.max_depth} levels")
    char = _character_at(text, mark)
    if char is not None and "found character that" in problem:  # the C parser leaves the character out
        problem = problem.replace("found character that", f"found {char}, a character that", 1)
    hint = "; YAML indents with spaces: replace the tab with spaces" if char and char.startswith("a tab") else ""
    return _fail(source, mark, f"not valid YAML ({problem}){hint}")


def load_yaml(text: str, source: str = "<yaml text>", limits: YamlLimits = CONFIG_LIMITS) -> Any:
    """``text`` checked against ``limits`` (:func:`check_yaml`), then built with PyYAML's safe loader:
    plain data only, tags such as ``!!python/object`` refused."""
    check_yaml(text, source, limits)
    try:
        return yaml.load(text, Loader=_LOADER)
    except yaml.constructor.ConstructorError as e:
        raise _fail(source, e.problem_mark, f"not a safe YAML document ({e.problem}): write plain YAML without "
                    "!!python tags or other constructors") from None
    except yaml.YAMLError as e:
        raise _yaml_error(source, e, limits, text) from None


def check_file_size(path: str | os.PathLike, limits: YamlLimits = CONFIG_LIMITS, *, what: str = "YAML file") -> None:
    """Refuse the file ``path`` by its size alone, before anything reads it."""
    try:
        size = Path(path).stat().st_size
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the {what} ({e.strerror or e})") from None
    if size > limits.max_bytes:
        raise ConfigError(f"{path}: {size:,} bytes is over the limit of {limits.max_bytes:,} bytes for a {what}; "
                          "nothing was built or written")


def read_yaml_text(path: str | os.PathLike, limits: YamlLimits = CONFIG_LIMITS, *, what: str = "YAML file") -> str:
    """The text of the file ``path``, refused by its size before it is read."""
    path = Path(path)
    check_file_size(path, limits, what=what)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}); save the {what} as UTF-8") from None


def read_yaml(path: str | os.PathLike, limits: YamlLimits = CONFIG_LIMITS, *, what: str = "YAML file") -> Any:
    """The YAML file ``path`` loaded within ``limits``."""
    return load_yaml(read_yaml_text(path, limits, what=what), str(path), limits)
