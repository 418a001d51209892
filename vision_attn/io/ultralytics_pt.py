"""Reading ultralytics ``.pt`` checkpoints without ultralytics and without running anything in them.

An ultralytics checkpoint is a pickle (torch's zip format) of a dict whose ``model`` and ``ema``
entries are ``ultralytics.nn.tasks.DetectionModel`` objects (``SegmentationModel``, a subclass, in a
-seg.pt), saved in half precision, beside plain training data (``train_args``, metrics, dates).
``torch.load(weights_only=True)`` refuses it at the first ultralytics class and a plain ``torch.load``
imports ultralytics and calls whatever the pickle names. The restricted unpickler of :mod:`vision_attn.io.restricted_pickle` reads it instead, with
:data:`ULTRALYTICS_RECORDS`: any ``ultralytics.*`` class (and ``torch.nn`` module class) becomes an
inert record of its pickled attributes, ``IterableSimpleNamespace`` too, and every other global is
refused naming it and the file, before anything is called. Only the chosen model's tensors are read
from the file, as float32.

:func:`read_ultralytics_checkpoint` turns the records into an :class:`UltralyticsCheckpoint`: plain
data (weights with ultralytics' keys, the model YAML dict, class names, training arguments).
"""
from __future__ import annotations

import pathlib
import pickletools
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from vision_attn.errors import CheckpointError
from vision_attn.io.restricted_pickle import (NAMESPACES, LazyTensor, ObjectRecord, RecordClasses, materialise,
                                              open_archive, open_restricted)

__all__ = ["ULTRALYTICS_RECORDS", "UltralyticsCheckpoint", "is_ultralytics_checkpoint", "module_state_dict",
           "read_ultralytics_checkpoint", "to_plain"]

ULTRALYTICS_RECORDS = RecordClasses(
    names=NAMESPACES | {"ultralytics.utils.IterableSimpleNamespace"}, modules=frozenset({"ultralytics"}),
    prefixes=("ultralytics.", "vision_attn.integrations.ultralytics"), described="ultralytics or torch.nn")
"""The classes of an ultralytics checkpoint kept as records: ultralytics' own (and our blocks registered
into its parser, :mod:`vision_attn.integrations.ultralytics`), beside torch.nn's and the namespaces."""


def is_ultralytics_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a torch zip checkpoint whose pickle names ultralytics classes (read, not run)."""
    path = Path(path)
    if not path.is_file() or not zipfile.is_zipfile(path):
        return False
    try:
        archive, prefix = open_archive(path)
    except CheckpointError:
        return False
    with archive:
        data = archive.read(f"{prefix}data.pkl")
    if b"ultralytics" not in data:
        return False
    try:
        return any(op.name in ("GLOBAL", "SHORT_BINUNICODE", "BINUNICODE", "UNICODE") and isinstance(arg, str)
                   and arg.startswith("ultralytics") for op, arg, _ in pickletools.genops(data))
    except (ValueError, struct.error):
        return False


def module_state_dict(record: ObjectRecord, prefix: str = "", float32: bool = False) -> dict[str, torch.Tensor]:
    """A module record's state dict, as ``nn.Module.state_dict()`` orders it: parameters, persistent
    buffers, then children; entries that are None are left out (``float32``: floating tensors as float32)."""
    if not record.is_module:
        raise CheckpointError(f"{record.global_name} is not a module (no parameters and children)")
    out: dict[str, torch.Tensor] = {}
    skip = record.state.get("_non_persistent_buffers_set") or set()
    for table in ("_parameters", "_buffers"):
        for name, value in (record.state.get(table) or {}).items():
            if value is None or (table == "_buffers" and name in skip):
                continue
            if not isinstance(value, (torch.Tensor, LazyTensor)):
                raise CheckpointError(f"{record.global_name}: {prefix}{name} is {type(value).__name__}, not a tensor")
            out[prefix + name] = materialise(value, float32)
    for name, child in record.children.items():
        if child is None:
            continue
        if not isinstance(child, ObjectRecord):
            raise CheckpointError(f"{record.global_name}: child {prefix}{name} is {type(child).__name__}")
        out.update(module_state_dict(child, f"{prefix}{name}.", float32))
    return out


def to_plain(value: Any) -> Any:
    """Records of namespaces become dicts, numpy scalars numbers, paths strings; containers recursed."""
    if isinstance(value, LazyTensor):
        return value.materialise()
    if isinstance(value, ObjectRecord):
        if value.is_module:
            return value
        return {k: to_plain(v) for k, v in value.state.items()}
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_plain(v) for v in value) if not hasattr(value, "_fields") else value
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass(frozen=True)
class UltralyticsCheckpoint:
    """What an ultralytics ``.pt`` holds, as plain data: the float32 state dict of ``ema`` (else
    ``model``) with ultralytics' keys (``model.0.conv.weight``, ...), the model YAML as a dict, the class
    names in index order, the training arguments and the other top-level entries (epoch, metrics,
    date, version; not the optimizer). The detection task lays it out as one of its runs' checkpoints
    (:func:`vision_attn.tasks.detect.run.ultralytics_run_checkpoint`)."""

    path: Path
    state_dict: dict[str, torch.Tensor]
    yaml: dict[str, Any]
    names: list[str]
    train_args: dict[str, Any]
    source: str
    model_class: str
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def nc(self) -> int:
        return len(self.names) if self.names else int(self.yaml.get("nc", 80))

    @property
    def img_size(self) -> int:
        """The training image size (``train_args["imgsz"]``; its largest side if a pair), else 640."""
        size = self.train_args.get("imgsz", 640)
        size = max(size) if isinstance(size, (list, tuple)) and size else size
        return int(size) if isinstance(size, (int, float)) and not isinstance(size, bool) and size > 0 else 640

    @property
    def scale(self) -> str | None:
        """The scale letter the YAML dict names (None for a YAML without ``scales``)."""
        return self.yaml.get("scale") if self.yaml.get("scales") else None


def _names(raw: Any, yaml: dict[str, Any], path: Path) -> list[str]:
    if raw is None:
        raw = yaml.get("names")
    if raw is None:
        return [str(i) for i in range(int(yaml.get("nc", 0)))]
    if isinstance(raw, Mapping):
        try:
            return [str(raw[i]) for i in sorted(raw, key=int)]
        except (TypeError, ValueError):
            raise CheckpointError(f"{path}: class names {str(raw)[:80]} are not keyed by class index") from None
    if isinstance(raw, (list, tuple)):
        return [str(n) for n in raw]
    raise CheckpointError(f"{path}: class names of type {type(raw).__name__}; expected a dict or list")


_SKIPPED = ("model", "ema", "optimizer", "scaler", "modelopt")


def read_ultralytics_checkpoint(path: str | Path) -> UltralyticsCheckpoint:
    """Read an ultralytics ``.pt`` (best.pt, last.pt, yolov8n.pt, ...) safely: see the module docstring.

    Floating tensors come back as float32 (ultralytics saves half precision); only the chosen model's
    tensors are read from the file. A file without an ultralytics model under ``ema`` or ``model``
    raises :class:`CheckpointError`.
    """
    path = Path(path)
    with open_restricted(path, ULTRALYTICS_RECORDS) as top:
        if not isinstance(top, Mapping):
            raise CheckpointError(f"{path}: holds {type(top).__name__}, not an ultralytics checkpoint dict")
        source = next((k for k in ("ema", "model") if isinstance(top.get(k), ObjectRecord)), None)
        if source is None:
            raise CheckpointError(f"{path}: no ultralytics model under 'ema' or 'model' (keys {list(top)[:8]}); "
                                  f"not an ultralytics checkpoint")
        record: ObjectRecord = top[source]
        if not record.is_module:
            raise CheckpointError(f"{path}: '{source}' holds {record.global_name}, which is not a module")
        attrs = record.attributes
        yaml = to_plain(attrs.get("yaml"))
        if not isinstance(yaml, dict) or "backbone" not in yaml:
            raise CheckpointError(f"{path}: the model under '{source}' carries no YAML dict with a 'backbone'; "
                                  f"vision_attn builds the network from it")
        state = module_state_dict(record, float32=True)
        args = top.get("train_args") if top.get("train_args") is not None else attrs.get("args")
        train_args = to_plain(args) if args is not None else {}
        if not isinstance(train_args, dict):
            raise CheckpointError(f"{path}: 'train_args' is {type(train_args).__name__}, not a mapping")
        stride = to_plain(attrs.get("stride"))
        info = {k: to_plain(v) for k, v in top.items() if k not in _SKIPPED and k != "train_args"}
        info["stride"] = stride.tolist() if isinstance(stride, torch.Tensor) else stride
        names = _names(attrs.get("names"), yaml, path)
    return UltralyticsCheckpoint(path=path, state_dict=state, yaml=yaml, names=names, train_args=train_args,
                                 source=source, model_class=record.global_name, info=info)
