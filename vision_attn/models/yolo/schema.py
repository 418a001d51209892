"""Reading and checking a detector YAML in the ultralytics schema, without running anything in it.

``nc``, ``scales`` (letter -> ``[depth, width, max_channels]``) or ``depth_multiple`` /
``width_multiple``, ``activation``, and ``backbone`` + ``head``: one list of rows
``[from, repeats, module, args]`` numbered from 0. Every problem is a :class:`ConfigError` naming
the file, the row and the field, and how to fix it.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from vision_attn.errors import ConfigError
from vision_attn.io.resources import resolve_path, without_scale
from vision_attn.io.yaml import DETECTOR_LIMITS, read_yaml_text
from vision_attn.io.yaml import load_yaml as read_yaml_document
from vision_attn.models.yolo.modules import ACTIVATIONS, MODULES
from vision_attn.models.yolo.pose import check_kpt_shape

__all__ = ["Row", "DetectorSpec", "load_yaml", "parse_spec", "scale_from_name", "TOP_LEVEL_KEYS"]

TOP_LEVEL_KEYS = ("nc", "scales", "depth_multiple", "width_multiple", "max_channels", "activation", "backbone",
                  "head", "ch", "channels", "reg_max", "end2end", "scale", "yaml_file", "kpt_shape")
"""Keys a YAML may have; others are refused (with suggestions), so that a typo cannot pass unnoticed."""

NAMES = ("nc", "kpt_shape")

MULTI_INPUT_KINDS = ("concat", "fuse", "detect", "rtdetr")
"""Module kinds whose row takes a list of inputs."""

MAX_REPEATS = 64
"""Bounds that keep a hostile file from asking for unbounded memory or time."""
MAX_CHANNELS = 16384
"""Argument strings that stand for a value the schema defines."""

@dataclass(frozen=True)
class Row:
    """One row: ``index`` in the whole list, ``inputs`` absolute indices (-1 = the image)."""

    index: int
    from_: int | list[int]
    repeats: int
    module: str
    args: list[Any]
    section: str
    inputs: tuple[int, ...] = field(default=())


@dataclass
class DetectorSpec:
    """A checked YAML: the rows and the chosen scale."""

    rows: list[Row]
    nc: int
    depth: float
    width: float
    max_channels: float
    scale: str | None
    activation: str | None
    source: str
    raw: dict[str, Any]
    reg_max: int = 16
    end2end: bool = False
    kpt_shape: tuple[int, int] | None = None


def scale_from_name(name: str) -> str | None:
    """The scale letter in a file name such as ``yolov8n.yaml`` or ``yolo11s-cbam.yaml``."""
    return without_scale(Path(name).name)[1]


def load_yaml(source: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The YAML as a dict and a label for messages. ``source``: a dict, a path, or YAML text (a string
    holding a newline). Read by :mod:`vision_attn.io.yaml` within its bounds (no anchors or aliases, no tags such as
    ``!!python/object``)."""
    if isinstance(source, Mapping):
        return dict(source), "<dict>"
    text_given = isinstance(source, str) and "\n" in source
    label = "<yaml text>" if text_given else str(source)
    if text_given:
        text = str(source)
    else:
        path = resolve_path(source, kinds=("model",))  # yolov8n.yaml -> yolov8.yaml (scale n); shipped names
        if path is None or not path.is_file():
            raise ConfigError(f"{label}: no such YAML file; give a path to a detector YAML or a shipped name "
                              "(`vision-attn configs` lists them, e.g. yolov8n.yaml)")
        text = read_yaml_text(path, DETECTOR_LIMITS, what="detector YAML")
    data = read_yaml_document(text, label, DETECTOR_LIMITS)
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: the YAML must be a mapping with 'backbone' and 'head' lists, "
                          f"not {type(data).__name__}")
    return data, label


def _fail(label: str, where: str, message: str) -> ConfigError:
    return ConfigError(f"{label}: {where}: {message}")


def _check_literal(value: Any, label: str, where: str) -> None:
    """Numbers, strings, booleans, None and lists of them (mappings of them for attention keywords)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return
    if isinstance(value, list):
        for v in value:
            _check_literal(v, label, where)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise _fail(label, where, f"keyword {k!r} is not a string")
            _check_literal(v, label, where)
        return
    raise _fail(label, where, f"{value!r} ({type(value).__name__}) is not a literal; use numbers, strings, "
                              "booleans, null or lists")


def _activation(value: Any, label: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        key = value.strip()
        key = key[len("torch."):] if key.startswith("torch.nn.") else key
        if key in ACTIVATIONS:
            return key
        spelled = f"nn.{key}" if not key.startswith("nn.") else key
        spelled = spelled if spelled.endswith(")") else spelled + "()"
        if spelled in ACTIVATIONS:
            return spelled
    known = ", ".join(ACTIVATIONS)
    raise ConfigError(f"{label}: field 'activation': {str(value)[:80]!r} is not a known activation; it is "
                      f"matched as text, never run; use one of {known}")


def _scale(data: dict[str, Any], scale: str | None, label: str) -> tuple[float, float, float, str | None]:
    scales = data.get("scales")
    if scales is not None:
        if not isinstance(scales, dict) or not scales:
            raise _fail(label, "field 'scales'", "must map letters to [depth, width, max_channels]")
        # ultralytics keeps the scale it built at in the model dict (``scale: s``), e.g. inside a .pt
        chosen = scale or data.get("scale") or scale_from_name(label) or next(iter(scales))
        if chosen not in scales:
            raise _fail(label, "field 'scales'", f"scale {chosen!r} is not defined; the file defines "
                                                 f"{', '.join(map(str, scales))}")
        values = scales[chosen]
        if (not isinstance(values, list) or len(values) != 3
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values)):
            raise _fail(label, f"field 'scales' letter {chosen!r}",
                        f"{values!r} must be [depth, width, max_channels], three positive numbers")
        return float(values[0]), float(values[1]), float(values[2]), str(chosen)
    if scale is not None:
        raise _fail(label, "field 'scales'", f"scale {scale!r} asked for, but the file defines no 'scales'")
    vals = []
    for key in ("depth_multiple", "width_multiple"):
        v = data.get(key, 1.0)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
            raise _fail(label, f"field {key!r}", f"{v!r} must be a positive number")
        vals.append(float(v))
    cap = data.get("max_channels", float("inf"))
    return vals[0], vals[1], float(cap), None


def _check_from(value: Any, index: int, label: str) -> tuple[int, ...]:
    where = f"row {index} field 'from'"
    items = value if isinstance(value, list) else [value]
    if not items:
        raise _fail(label, where, "an empty list; give -1 (the previous row), an index or a list of them")
    inputs = []
    for f in items:
        if not isinstance(f, int) or isinstance(f, bool):
            raise _fail(label, where, f"{f!r} is not an integer; give -1, another negative offset or an "
                                      "absolute row index")
        absolute = index + f if f < 0 else f
        if f >= 0 and f >= index:
            raise _fail(label, where, f"{f} points forward (a row may only take earlier rows, 0..{index - 1})")
        if absolute < 0 and not (index == 0 and f == -1):
            raise _fail(label, where, f"{f} points before row 0 (out of range: offsets from row {index} "
                                      f"go back at most {-index})")
        inputs.append(-1 if index == 0 and f == -1 else absolute)
    return tuple(inputs)


def _check_row(row: Any, index: int, section: str, label: str) -> Row:
    where = f"row {index} ({section})"
    if not isinstance(row, list) or len(row) != 4:
        n = len(row) if isinstance(row, list) else "not a list"
        raise _fail(label, where, f"{row!r} has {n} fields; a row is [from, repeats, module, args]")
    from_, repeats, module, args = row
    inputs = _check_from(from_, index, label)
    if not isinstance(repeats, int) or isinstance(repeats, bool) or not 1 <= repeats <= MAX_REPEATS:
        raise _fail(label, f"row {index} field 'repeats'", f"{repeats!r} must be a whole number from 1 to {MAX_REPEATS}")
    if not isinstance(module, str) or module not in MODULES:
        close = difflib.get_close_matches(str(module), list(MODULES), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise _fail(label, f"row {index} field 'module'",
                    f"unknown module {str(module)[:80]!r}; {hint}known modules: {', '.join(MODULES)}")
    if args is None:
        args = []
    if not isinstance(args, list):
        raise _fail(label, f"row {index} field 'args'", f"{args!r} must be a list (use [] for none)")
    _check_literal(args, label, f"row {index} field 'args'")
    if len(inputs) > 1 and MODULES[module].kind not in MULTI_INPUT_KINDS:
        raise _fail(label, f"row {index} field 'from'",
                    f"{module} takes one input; only Concat, CBFuse and the heads take a list of several")
    return Row(index, from_, repeats, module, list(args), section, inputs)


def parse_spec(source: str | Path | Mapping[str, Any], *, scale: str | None = None,
               num_classes: int | None = None, kpt_shape: Sequence[int] | None = None) -> DetectorSpec:
    """Load (safely) and check a detector YAML; ``scale``, ``num_classes`` and ``kpt_shape`` (a keypoint
    head's [keypoints, dims], e.g. the data set's) override the file."""
    data, label = load_yaml(source)
    unknown = [k for k in data if k not in TOP_LEVEL_KEYS]
    if unknown:
        k = str(unknown[0])
        close = difflib.get_close_matches(k, TOP_LEVEL_KEYS, n=2, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ConfigError(f"{label}: unknown key {k[:80]!r}; {hint}known keys: {', '.join(TOP_LEVEL_KEYS)}")
    nc = num_classes if num_classes is not None else data.get("nc", 80)
    if not isinstance(nc, int) or isinstance(nc, bool) or nc < 1:
        raise _fail(label, "field 'nc'", f"{nc!r} must be a whole number of classes >= 1")
    activation = _activation(data.get("activation"), label)
    for key in ("ch", "channels"):
        v = data.get(key, 3)
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 64:
            raise _fail(label, f"field {key!r}", f"{v!r} must be the input's channel count, 1 to 64")
    depth, width, cap, chosen = _scale(data, scale, label)
    reg_max = data.get("reg_max", 16)
    if not isinstance(reg_max, int) or isinstance(reg_max, bool) or not 1 <= reg_max <= 64:
        raise _fail(label, "field 'reg_max'", f"{reg_max!r} must be the number of box-distance bins, 1 to 64 "
                                              "(16 for YOLOv8/11, 1 for YOLO26)")
    end2end = data.get("end2end", False)
    if end2end is None:
        end2end = False
    if not isinstance(end2end, bool):
        raise _fail(label, "field 'end2end'", f"{end2end!r} must be true or false")
    rows: list[Row] = []
    for section in ("backbone", "head"):
        part = data.get(section)
        if not isinstance(part, list) or (section == "backbone" and not part):
            raise _fail(label, f"field {section!r}", "must be a non-empty list of rows [from, repeats, module, args]")
        for row in part:
            rows.append(_check_row(row, len(rows), section, label))
    if end2end and not any(MODULES[r.module].kind == "detect" for r in rows):
        raise _fail(label, "field 'end2end'", "true, but no row is a detection head with a one-to-one branch; end "
                                              "the rows with [[P3, P4, P5], 1, Detect, [nc]] or remove 'end2end'")
    keypoints = kpt_shape if kpt_shape is not None else data.get("kpt_shape")
    try:
        shape = check_kpt_shape(keypoints) if keypoints is not None else None
    except ConfigError as e:
        raise _fail(label, "field 'kpt_shape'", str(e)) from None
    return DetectorSpec(rows, nc, depth, width, cap, chosen, activation, label, data, reg_max, end2end, shape)
