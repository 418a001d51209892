"""What the analysis commands take as TARGET: a registered model name, a detector YAML or a run's
checkpoint, resolved to an ``nn.Module`` (on the ``meta`` device by default: no memory, no arithmetic).

Resolution order: an existing ``.yaml``/``.yml`` file is a detector YAML (built with
:func:`vision_attn.build_detector`, counted at 640 px by default); an existing file or folder is a run's
checkpoint (``runs/NAME`` or its ``best.ckpt``/``last.ckpt``, read with ``weights_only=True``), whose
hyper-parameters name the model (a registered name, or a YAML for detection runs), or a detection
checkpoint carrying its YAML, or an ultralytics ``.pt`` (its model YAML; read without ultralytics);
anything else must be a registered model name. A target that is none of these raises :class:`ConfigError` saying what
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

from vision_attn.errors import CheckpointError, ConfigError
from vision_attn.io.ultralytics_pt import is_ultralytics_checkpoint, read_ultralytics_checkpoint

__all__ = ["Target", "load_target", "YAML_SUFFIXES", "DETECTOR_IMG_SIZE"]

YAML_SUFFIXES = (".yaml", ".yml")
DETECTOR_IMG_SIZE = 640
"""The image size a detector YAML is counted at unless told otherwise (ultralytics' convention)."""
_HP_YAML_KEYS = ("yaml", "model_yaml", "cfg", "name", "model")


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


def _is_yaml_name(value: Any) -> bool:
    return isinstance(value, str) and value.lower().endswith(YAML_SUFFIXES)


def _build_yaml(path: str | dict[str, Any], scale: str | None, num_classes: int | None, device: str | torch.device) -> nn.Module:
    from vision_attn.models.yolo import build_detector

    with torch.device(device):
        return build_detector(path, scale=scale, num_classes=num_classes)


def _from_checkpoint(path: Path, scale: str | None, device: str | torch.device) -> Target:
    """A run's checkpoint: the architecture from its hyper-parameters (weights are not loaded)."""
    if path.is_dir():
        found = [path / n for n in ("best.ckpt", "last.ckpt") if (path / n).is_file()]
        if not found:
            raise CheckpointError(f"{path}: a folder without best.ckpt or last.ckpt; give a run folder "
                                  "(runs/NAME) or a checkpoint file")
        path = found[0]
    if is_ultralytics_checkpoint(path):  # read without ultralytics; the architecture is its YAML dict
        pt = read_ultralytics_checkpoint(path)
        model = _build_yaml(pt.yaml, scale, pt.nc, device)
        return Target(model, f"{path.name} (ultralytics)", "checkpoint", pt.img_size, {"train_args": pt.train_args})
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is one error line
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(f"{path}: not a readable checkpoint ({detail})") from None
    hp = dict(ckpt.get("hyper_parameters") or {}) if isinstance(ckpt, dict) else {}
    yaml_ref = next((hp[k] for k in _HP_YAML_KEYS if _is_yaml_name(hp.get(k))), None)
    if yaml_ref is not None:  # a detection run: its model YAML, relative to the run if need be
        candidates = [Path(yaml_ref), path.parent / yaml_ref, path.parent / Path(yaml_ref).name]
        found_yaml = next((c for c in candidates if c.is_file()), None)
        if found_yaml is None:
            raise CheckpointError(f"{path}: its model YAML {yaml_ref} is not there any more; give the YAML itself")
        model = _build_yaml(str(found_yaml), hp.get("scale", scale), hp.get("num_classes"), device)
        data_hp = ckpt.get("datamodule_hyper_parameters") or {}
        size = hp.get("img_size") or (data_hp.get("img_size") if isinstance(data_hp, dict) else None)
        return Target(model, f"{path.parent.name}/{path.name}", "checkpoint", size or DETECTOR_IMG_SIZE, hp)
    if isinstance(ckpt, dict) and isinstance(ckpt.get("detector_yaml"), str):  # e.g. from `yaml insert --checkpoint`
        model = _build_yaml(ckpt["detector_yaml"], hp.get("scale", scale), hp.get("num_classes"), device)
        data_hp = ckpt.get("datamodule_hyper_parameters") or {}
        size = data_hp.get("img_size") if isinstance(data_hp, dict) else None
        return Target(model, path.name, "checkpoint", size or DETECTOR_IMG_SIZE, hp)
    if "name" not in hp:
        raise CheckpointError(f"{path}: a checkpoint without a model name in its hyper-parameters (not a "
                              "vision_attn run); for plain weights use the model name and create_model(name, "
                              "pretrained=PATH)")
    from vision_attn.models import create_model

    kwargs = dict(hp.get("model_kwargs") or {})  # as the run built it: the data's image size unless set
    if hp.get("img_size") is not None and "img_size" not in kwargs and not hp["name"].startswith("timm:"):
        kwargs["img_size"] = hp["img_size"]
    with torch.device(device):
        model = create_model(hp["name"], num_classes=hp.get("num_classes"), attention=hp.get("attention"), **kwargs)
    return Target(model, f"{hp['name']} ({path.parent.name}/{path.name})", "checkpoint", hp.get("img_size"), hp)


def load_target(target: str | os.PathLike, *, scale: str | None = None, attention: str | None = None,
                device: str | torch.device = "meta") -> Target:
    """Resolve ``target`` (model name, detector YAML or run checkpoint) to a model on ``device``.

    ``scale``: the YAML's scale letter (default: from the file name); ``attention``: a block
    (``"cbam"``, ``"se"``, ...) inserted into a registered CNN, as ``create_model(attention=...)``.
    """
    from vision_attn.models import create_model, list_models

    text = os.fspath(target)
    path = Path(text)
    if path.suffix.lower() in YAML_SUFFIXES:
        if not path.is_file():
            raise ConfigError(f"{text}: no such YAML file")
        return Target(_build_yaml(text, scale, None, device), path.name, "yaml", DETECTOR_IMG_SIZE, {})
    if path.exists():
        return _from_checkpoint(path, scale, device)
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
