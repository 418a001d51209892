"""A detector of ours from an ultralytics ``.pt``: built from the YAML dict the file carries (at the
scale it names), loaded with the file's float32 weights. ultralytics and our builder give the same
state-dict keys, so the weights load strictly; only a class-count change re-initialises the last
layer of each class branch (the head's ``cv3.*.2``), and :func:`detector_from_ultralytics` says so."""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import torch

from vision_attn.io.ultralytics_pt import UltralyticsCheckpoint, read_ultralytics_checkpoint
from vision_attn.models.yolo.builder import DetectionModel, build_detector

__all__ = ["LoadedDetector", "detector_from_ultralytics", "class_layer_keys"]


@dataclass
class LoadedDetector:
    """The model, the checkpoint it came from and the keys left at their initialisation (a new class count)."""

    model: DetectionModel
    checkpoint: UltralyticsCheckpoint
    reinitialised: list[str]


def class_layer_keys(state: dict[str, torch.Tensor], own: dict[str, torch.Tensor]) -> list[str]:
    """Keys whose shape differs between ``state`` and ``own`` (the class outputs after a change of ``nc``)."""
    return [k for k, v in own.items() if k in state and tuple(state[k].shape) != tuple(v.shape)]


def detector_from_ultralytics(source: str | os.PathLike | UltralyticsCheckpoint, *,
                              num_classes: int | None = None) -> LoadedDetector:
    """Our detector for an ultralytics checkpoint (a path or an already read one); ``num_classes`` other
    than the file's keeps every tensor but the class outputs, with a warning naming them."""
    ckpt = source if isinstance(source, UltralyticsCheckpoint) else read_ultralytics_checkpoint(source)
    scale = ckpt.yaml.get("scale") if ckpt.yaml.get("scales") else None
    model = build_detector(ckpt.yaml, scale=scale, num_classes=num_classes)
    own = model.state_dict()
    refit = class_layer_keys(ckpt.state_dict, own)
    state = {k: v for k, v in ckpt.state_dict.items() if k not in refit}
    model.load_state_dict(state, strict=not refit)
    if refit:
        warnings.warn(f"{ckpt.path}: {len(ckpt.names)} classes in the file, {model.nc} in the model: kept "
                      f"{len(state)} of {len(own)} tensors; the class outputs ({', '.join(refit)}) start from "
                      f"their initialisation and need training", stacklevel=2)
    return LoadedDetector(model, ckpt, refit)
