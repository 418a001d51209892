"""What the analysis commands take as TARGET: a registered model name, a detector YAML or a run's
checkpoint, resolved to an ``nn.Module`` (on the ``meta`` device by default: no memory, no arithmetic).

Resolution order: a ``.yaml``/``.yml`` name is a detector YAML (a file, or a shipped name such as
``yolov8n.yaml``; built with :func:`vision_attn.build_detector`, counted at 640 px by default); an
existing file or folder is a run (``runs/NAME`` or its ``best.ckpt``/``last.ckpt``), rebuilt by
:func:`vision_attn.tasks.load_run` from the model description its checkpoint records (an ultralytics
``.pt`` too: its model YAML, read without ultralytics); anything else
must be a registered model name. A target that is none of these raises :class:`ConfigError` saying what
was tried, with close model names.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.io.resources import resolve_path
from vision_attn.models import build_detector, create_model, list_models

__all__ = ["Target", "load_target", "YAML_SUFFIXES", "DETECTOR_IMG_SIZE"]

YAML_SUFFIXES = (".yaml", ".yml")
DETECTOR_IMG_SIZE = 640
"""The image size a detector YAML is counted at unless told otherwise (ultralytics' convention)."""


@dataclass
class Target:
    """A resolved TARGET: the model, a display name, its kind (``"model"``, ``"yaml"`` or
    ``"checkpoint"``), the image size it should be counted at (``None``: the model's own) and the
    checkpoint's hyper-parameters (empty for the other kinds)."""

    model: nn.Module
    name: str
    kind: str
    img_size: int | tuple[int, int] | None
    hparams: dict[str, Any]


def _build_yaml(path: str, scale: str | None, num_classes: int | None, device: str | torch.device) -> nn.Module:
    with torch.device(device):
        return build_detector(path, scale=scale, num_classes=num_classes)


def _from_checkpoint(path: Path, device: str | torch.device) -> Target:
    """A run (its folder or checkpoint): the architecture its checkpoint records (weights are not loaded)."""
    from vision_attn.tasks.registry import load_run  # deferred: the tasks import Lightning, a model name needs none

    run = load_run(path, device=device, weights=False)
    h, w = run.img_size
    size: int | tuple[int, int] | None = h if h == w else (h, w)
    if not run.size_recorded:
        size = None  # the model's own
    return Target(run.model, run.label, "checkpoint", size, run.hparams)


def load_target(target: str | os.PathLike, *, scale: str | None = None, attention: str | None = None,
                device: str | torch.device = "meta") -> Target:
    """Resolve ``target`` (model name, detector YAML or run checkpoint) to a model on ``device``.

    ``scale``: the YAML's scale letter (default: from the file name); ``attention``: a block
    (``"cbam"``, ``"se"``, ...) inserted into a registered CNN, as ``create_model(attention=...)``.
    """
    text = os.fspath(target)
    path = Path(text)
    if path.suffix.lower() in YAML_SUFFIXES:
        if resolve_path(text, kinds=("model",)) is None:
            raise ConfigError(f"{text}: no such YAML file (nor a shipped one: `vision-attn configs`)")
        return Target(_build_yaml(text, scale, None, device), path.name, "yaml", DETECTOR_IMG_SIZE, {})
    if path.exists():
        return _from_checkpoint(path, device)
    names = list_models()
    if text in names or text.startswith("timm:"):
        with torch.device(device):
            model = create_model(text, attention=attention)
        name = f"{text}+{attention}" if attention else text
        return Target(model, name, "model", None, {})
    close = difflib.get_close_matches(text, names, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else "run `vision-attn models` to list the model names"
    raise ConfigError(f"unknown model {text!r}: tried a registered model name ({hint}), a detector YAML "
                      f"(not a .yaml/.yml file) and a checkpoint or run folder (no such path): it is none of them")
