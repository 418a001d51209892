"""The network to deploy, from a model name, a checkpoint or a detector YAML, in eval mode with the
input size it is exported at and how a real image is prepared for it.

- ``model=NAME``: :func:`vision_attn.create_model` (random weights), or with ``checkpoint=FILE`` a
  plain state dict in any layout ``create_model(pretrained=...)`` recognises; a file of another
  architecture is refused with the keys that do not fit.
- ``checkpoint=RUN`` alone: a run's folder or its ``best.ckpt``/``last.ckpt``, classifier, detector or
  segmenter, with its own image size, classes and normalisation (:func:`vision_attn.tasks.load_run`).
- ``yaml=FILE``: :func:`vision_attn.build_detector` (a detection or -seg YAML); with ``checkpoint`` a
  state dict loaded strictly.

What the graph returns: :attr:`Deployable.outputs` (:mod:`vision_attn.export.outputs`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from vision_attn.errors import CheckpointError, ConfigError
from vision_attn.export.outputs import OUTPUTS, Kind, kind_of
from vision_attn.io.resources import resolve_path
from vision_attn.io.state_dict import read_state_dict
from vision_attn.models import build_detector, create_model
from vision_attn.models.yolo.transfer import detector_state
from vision_attn.tasks.registry import get_task, load_run, task_of_export_kind

__all__ = ["Deployable", "load_deployable", "IMAGENET_MEAN", "IMAGENET_STD", "DETECTOR_SIZE"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
DETECTOR_SIZE = 640

@dataclass
class Deployable:
    """An eval-mode network, its kind, its export input size (H, W) and its image normalisation
    (classifiers: ``(x / 255 - mean) / std``; detectors and segmenters: ``x / 255`` on a letterboxed
    image)."""

    model: nn.Module
    kind: Kind
    input_size: tuple[int, int]
    label: str
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    notes: list[str] = field(default_factory=list)
    transform: Callable[..., dict[str, Any]] | None = None  # a run's evaluation pipeline (albumentations)
    classes: list[str] | None = None
    task_name: str | None = None  # the run's task (None: not a run)

    @property
    def task(self) -> str:
        """The task whose ``eval`` and ``predict`` take this network: the run's, else the registry's task
        that exports as this kind."""
        return self.task_name or task_of_export_kind(self.kind).name

    @property
    def outputs(self) -> tuple[tuple[str, str], ...]:
        """The graph's outputs: (name, description) each (:data:`OUTPUTS`)."""
        return OUTPUTS[self.kind]

    @property
    def boxes(self) -> bool:
        """Whether the network finds instances in a letterboxed image (a detector or a segmenter)."""
        return self.kind != "classifier"


def _hw(img_size: int | tuple[int, int] | list[int] | None) -> tuple[int, int] | None:
    if img_size is None:
        return None
    if isinstance(img_size, int):
        return (img_size, img_size)
    sizes = [int(s) for s in img_size]
    return (sizes[0], sizes[0]) if len(sizes) == 1 else (sizes[0], sizes[1])


def _configured_size(model: nn.Module) -> tuple[int, int]:
    embed = getattr(model, "patch_embed", None)
    size = getattr(embed, "img_size", None)
    return tuple(int(s) for s in size) if size is not None else (224, 224)  # type: ignore[return-value]


def _classifier(name: str, checkpoint: str | None, size: tuple[int, int] | None) -> Deployable:
    notes: list[str] = []
    try:
        model = create_model(name, pretrained=checkpoint, img_size=size)
    except ConfigError as e:
        if size is None:
            raise
        # e.g. Swin at 192x256: its windows need a configured size they divide; any input size runs padded
        model = create_model(name, pretrained=checkpoint)
        notes.append(f"{name} cannot be configured for {size[0]}x{size[1]} ({str(e).split(':')[0]}); "
                     f"built at its default {'x'.join(map(str, _configured_size(model)))}, inputs of "
                     f"{size[0]}x{size[1]} run padded")
    if checkpoint is None:
        notes.append("random weights (no --checkpoint): the outputs mean nothing, the graph is real")
    return Deployable(model.eval(), "classifier", size or _configured_size(model), name, notes=notes)


def _run(checkpoint: str, size: tuple[int, int] | None) -> Deployable:
    run = load_run(checkpoint)
    if get_task(run.task).export_kind != "classifier":  # a network that finds instances in a letterboxed image
        dep = _checked_detector(run.model, size or run.img_size, run.label, [], classes=run.classes)
        dep.task_name = run.task
        return dep
    return Deployable(run.model, "classifier", size or run.img_size, run.label, mean=run.mean, std=run.std,
                      transform=run.transform if size is None or size == run.img_size else None, classes=run.classes,
                      task_name=run.task)


def _checked_detector(model: nn.Module, size: tuple[int, int], label: str, notes: list[str],
                      classes: list[str] | None = None) -> Deployable:
    kind, task = kind_of(model), getattr(model, "task", "detect")
    if kind == "classifier":
        raise ConfigError(f"{label}: a {task} model (its last row is {type(model.model[-1]).__name__}); "
                          "export --yaml takes a detection or segmentation YAML (a classifier YAML trains with "
                          "train cls and exports from its run folder)")
    stride = int(max(model.stride)) if model.stride else 32
    if size[0] % stride or size[1] % stride:
        raise ConfigError(f"--img-size {size[0]} {size[1]}: a detector's input sides must be multiples of its "
                          f"largest stride {stride}, e.g. {stride * max(1, round(size[0] / stride))}")
    return Deployable(model.eval(), kind, size, label, notes=notes, classes=classes)


def _detector(yaml: str, scale: str | None, checkpoint: str | None, size: tuple[int, int] | None) -> Deployable:
    if resolve_path(yaml, kinds=("model",)) is None:
        raise ConfigError(f"--yaml {yaml}: no such YAML file (nor a shipped one: `vision-attn configs`)")
    model = build_detector(yaml, scale=scale)
    notes = []
    if checkpoint is not None:
        state = detector_state(read_state_dict(checkpoint))
        expected = model.state_dict()
        missing = [k for k in expected if k not in state]
        unexpected = [k for k in state if k not in expected]
        shapes = [f"{k}: file {tuple(state[k].shape)} vs model {tuple(v.shape)}"
                  for k, v in expected.items() if k in state and state[k].shape != v.shape]
        if missing or unexpected or shapes:
            parts = [f"{len(x)} {what}: {'; '.join(x[:4])}{' ...' if len(x) > 4 else ''}"
                     for x, what in ((missing, "missing"), (unexpected, "not in the model"), (shapes, "shape mismatch"))
                     if x]
            raise CheckpointError(f"{checkpoint}: does not fit {yaml} at scale {model.scale or '-'} "
                                  f"({' | '.join(parts)}); give the YAML and --scale the weights were trained with")
        model.load_state_dict(state)
    else:
        notes.append("random weights (no --checkpoint): the outputs mean nothing, the graph is real")
    return _checked_detector(model, size or (DETECTOR_SIZE, DETECTOR_SIZE),
                             f"{os.path.basename(yaml)} scale {model.scale or '-'}", notes)


def load_deployable(*, model: str | None = None, checkpoint: str | None = None, yaml: str | None = None,
                    scale: str | None = None, img_size: int | tuple[int, int] | list[int] | None = None
                    ) -> Deployable:
    """The network named by exactly one of ``model``, ``yaml`` or a run ``checkpoint`` (see the module
    docstring), in eval mode on the CPU. ``img_size``: N or (H, W) of the exported input."""
    if (model is not None) + (yaml is not None) > 1:
        raise ConfigError("give either a model name (--model) or a detector YAML (--yaml), not both")
    if model is None and yaml is None and checkpoint is None:
        raise ConfigError("say what to export: --model NAME, --checkpoint runs/NAME/best.ckpt or --yaml FILE")
    if checkpoint is not None and not os.path.exists(checkpoint):
        raise CheckpointError(f"--checkpoint {checkpoint}: no such file or run folder")
    size = _hw(img_size)
    if size is not None and min(size) < 1:
        raise ConfigError(f"--img-size {size}: sides must be positive")
    with torch.device("cpu"):
        if yaml is not None:
            return _detector(yaml, scale, checkpoint, size)
        if model is not None:
            return _classifier(model, checkpoint, size)
        return _run(checkpoint, size)  # type: ignore[arg-type]
