"""A detector of ours from an ultralytics ``.pt``: built from the YAML dict the file carries (at the
scale it names), loaded with the file's float32 weights. ultralytics and our builder give the same
state-dict keys, so the weights load strictly; only a class-count change re-initialises the last
layer of each class branch (the head's ``cv3.*.2``; of a YOLO26 segmentation head also its semantic
branch's ``proto.semseg.2``), and :func:`detector_from_ultralytics` says so. A ``-seg.pt``
(``SegmentationModel``) gives a segmentation model (:class:`~vision_attn.models.yolo.segment.Segment`
head) the same way, a ``-pose.pt`` (``PoseModel``, its ``kpt_shape`` in the YAML dict) a keypoint model
(:class:`~vision_attn.models.yolo.pose.Pose`) and an ``-obb.pt`` (``OBBModel``) an oriented-box one
(:class:`~vision_attn.models.yolo.obb.OBB`)."""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
import yaml

from vision_attn.errors import ConfigError
from vision_attn.io.resources import resolve_path
from vision_attn.io.state_dict import StateDict, read_checkpoint, read_state_dict
from vision_attn.io.yaml import DETECTOR_LIMITS, read_yaml_text
from vision_attn.io.ultralytics_pt import UltralyticsCheckpoint, is_ultralytics_checkpoint, read_ultralytics_checkpoint
from vision_attn.models.yolo.builder import DetectionModel, build_detector

__all__ = ["LoadedDetector", "YamlSource", "detector_from_ultralytics", "class_layer_keys", "pretrained_yaml",
           "yaml_text"]

_DROPPED = ("yaml_file",)  # where ultralytics read the YAML from: a path on the training machine


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
    model = build_detector(ckpt.yaml, scale=ckpt.scale, num_classes=num_classes)
    own = model.state_dict()
    refit = class_layer_keys(ckpt.state_dict, own)
    state = {k: v for k, v in ckpt.state_dict.items() if k not in refit}
    model.load_state_dict(state, strict=not refit)
    if refit:
        warnings.warn(f"{ckpt.path}: {len(ckpt.names)} classes in the file, {model.nc} in the model: kept "
                      f"{len(state)} of {len(own)} tensors; the class outputs ({', '.join(refit)}) start from "
                      f"their initialisation and need training", stacklevel=2)
    return LoadedDetector(model, ckpt, refit)


def yaml_text(model_dict: Mapping[str, Any], source: str = "") -> str:
    """The model dict an ultralytics checkpoint carries, as a detector YAML that the editor and the
    builder read: the top-level keys first, then ``backbone`` and ``head`` with one row a line."""
    head = {k: v for k, v in model_dict.items() if k not in ("backbone", "head", *_DROPPED)}
    lines = [f"# the model of {source} (ultralytics checkpoint)\n"] if source else []
    lines.append(yaml.safe_dump(head, sort_keys=False, default_flow_style=None))
    for section in ("backbone", "head"):
        lines.append(f"{section}:\n")
        for row in model_dict.get(section) or []:
            lines.append(f"  - {yaml.safe_dump(list(row), default_flow_style=True, width=10_000).strip()}\n")
    return "".join(lines)


@dataclass
class YamlSource:
    """The detector YAML a command edits or describes, and the checkpoint that came with it: ``text``;
    ``spec`` (the file, whose name may carry the scale, or the text) for the builder; the checkpoint's
    path and, for an ultralytics .pt, what it holds."""

    text: str
    label: str
    spec: str | Path
    checkpoint_path: str | None = None
    ultralytics: UltralyticsCheckpoint | None = None

    @classmethod
    def resolve(cls, file: str | None, checkpoint: str | None = None) -> YamlSource:
        """``file``: a YAML or an ultralytics .pt (its YAML; it is the checkpoint too unless ``checkpoint``
        is given); without ``file`` the YAML inside ``checkpoint`` (an ultralytics .pt)."""
        if checkpoint is not None and not Path(checkpoint).is_file():
            raise ConfigError(f"--checkpoint {checkpoint}: no such file")
        file_is_pt = file is not None and is_ultralytics_checkpoint(file)
        ckpt_path = checkpoint or (file if file_is_pt else None)
        ultra = read_ultralytics_checkpoint(ckpt_path) if ckpt_path and is_ultralytics_checkpoint(ckpt_path) else None
        if file is None:
            if ultra is None:
                raise ConfigError("give a detector YAML (e.g. configs/models/yolov8.yaml), or --checkpoint with an "
                                  "ultralytics .pt whose model YAML is then used")
            text = yaml_text(ultra.yaml, str(ckpt_path))
            return cls(text, str(ckpt_path), text, ckpt_path, ultra)
        if file_is_pt:
            model = ultra if ultra is not None and Path(file) == Path(ckpt_path) else read_ultralytics_checkpoint(file)
            text = yaml_text(model.yaml, file)
            return cls(text, file, text, ckpt_path, ultra)
        found = resolve_path(file, kinds=("model",))
        if found is None or not found.is_file():
            raise ConfigError(f"{file}: no such YAML file (nor a shipped one: `vision-attn configs`)")
        return cls(read_yaml_text(found, DETECTOR_LIMITS, what="detector YAML"), file, found, ckpt_path, ultra)

    def weights(self) -> StateDict | None:
        """The checkpoint's state dict (None without one)."""
        if self.ultralytics is not None:
            return self.ultralytics.state_dict
        return read_state_dict(self.checkpoint_path) if self.checkpoint_path else None


def pretrained_yaml(path: str | os.PathLike) -> str | None:
    """The detector YAML a checkpoint carries, as text: the model dict of an ultralytics .pt or of a
    detection run's checkpoint (``model_yaml``, with its ``model_scale``), an older checkpoint's
    ``detector_yaml``; None for a plain state dict. Every format is read by
    :func:`vision_attn.io.state_dict.read_checkpoint`."""
    if not Path(path).is_file():
        return None
    obj = read_checkpoint(path)
    if isinstance(obj, UltralyticsCheckpoint):
        return yaml_text(obj.yaml, str(path))
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("detector_yaml"), str):
        return obj["detector_yaml"]
    model = obj.get("model_yaml")
    if not isinstance(model, dict):
        return None
    if obj.get("model_scale") and "scale" not in model:
        model = {**model, "scale": obj["model_scale"]}
    return yaml_text(model, str(path))
