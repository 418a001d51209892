"""A trained run as the tools after training see it: the network (EMA weights when the run kept an
EMA), its task, class names, input size and image normalisation, rebuilt from the model description
its checkpoint records (a ``create_model`` name and arguments, or a detector YAML's dict), never from a
path that may have moved. Each task's ``run.py`` fills one in; :func:`vision_attn.tasks.load_run`
picks the task from the checkpoint. An ultralytics ``.pt`` is a detection run's checkpoint here: read
as the :class:`~vision_attn.io.ultralytics_pt.UltralyticsCheckpoint` it holds, which the detection
task lays out as its own (:func:`vision_attn.tasks.detect.run.ultralytics_run_checkpoint`)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from vision_attn.errors import CheckpointError
from vision_attn.io.state_dict import lightning_weights, read_checkpoint, run_checkpoint_path
from vision_attn.io.ultralytics_pt import UltralyticsCheckpoint

__all__ = ["Run", "Runtime", "read_run_checkpoint", "read_task_checkpoint", "task_of", "task_of_yaml",
           "load_run_weights"]

Runtime = Callable[[nn.Module, tuple[int, int], Callable[[], list[torch.Tensor]] | None],
                   Callable[[torch.Tensor], torch.Tensor]]
"""``runtime(model, (H, W), calibration)``: the network ``model`` as another runtime runs it (an
onnxruntime or OpenVINO export, its INT8 model), a callable on (B, 3, H, W) float32 batches with the
model's outputs; ``calibration()`` gives batches of the task's own data through its evaluation
pipeline, for a runtime that calibrates (None where the task has no data). Prediction and evaluation
take one in place of the PyTorch model (``--runtime``)."""


@dataclass
class Run:
    """A trained run: ``task`` (a registered task's name), the eval-mode ``model``, ``classes``, ``img_size``
    (H, W), a display ``label``, the checkpoint ``path``, its ``hparams`` / ``data_hparams``, the
    normalisation (``mean``, ``std``), for classifiers the run's evaluation ``transform``, and
    ``size_recorded`` (False where ``img_size`` is a default, not the run's)."""

    task: str
    model: nn.Module
    classes: list[str]
    img_size: tuple[int, int]
    label: str
    path: Path
    hparams: dict[str, Any]
    data_hparams: dict[str, Any]
    mean: tuple[float, ...] = (0.485, 0.456, 0.406)
    std: tuple[float, ...] = (0.229, 0.224, 0.225)
    transform: Callable[..., dict[str, Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    size_recorded: bool = True  # False: img_size is the network's own default, the checkpoint records none


def read_run_checkpoint(path: str | os.PathLike) -> tuple[dict[str, Any] | UltralyticsCheckpoint, Path]:
    """The checkpoint dict of a run (``runs/NAME/best.ckpt``, or the run folder itself: its best, else
    last), or the :class:`UltralyticsCheckpoint` of an ultralytics ``.pt`` (a detection run's, see
    :func:`task_of`), and the file's path; CheckpointError for a file that is neither."""
    file = run_checkpoint_path(path)
    ckpt = read_checkpoint(file)
    if isinstance(ckpt, UltralyticsCheckpoint):
        return ckpt, file
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict):
        raise CheckpointError(f"{file}: not a vision_attn run checkpoint (no state_dict and hyper-parameters); for a "
                              "plain weights file use create_model(name, pretrained=PATH) or --model/--yaml with "
                              "--checkpoint")
    return ckpt, file


def read_task_checkpoint(path: str | os.PathLike, task: str) -> tuple[dict[str, Any] | UltralyticsCheckpoint, Path]:
    """:func:`read_run_checkpoint` of a ``task`` run: a checkpoint that records another task is a
    CheckpointError naming it and the commands that take it (one without a record is let through)."""
    ckpt, file = read_run_checkpoint(path)
    found = task_of(ckpt)
    if found not in (None, task):
        raise CheckpointError(f"{file}: the checkpoint of a {found} run, not of a {task} run; use `vision-attn eval "
                              f"{found}` / `predict {found}`")
    return ckpt, file


HEAD_TASKS = (("Segment", "seg"), ("Pose", "pose"), ("OBB", "obb"))
"""The task of a YAML whose last row's module name starts so (any other: ``det``)."""


def task_of_yaml(yaml: dict[str, Any]) -> str:
    """The task of a detector YAML's network by its last row: ``seg`` (a Segment head), ``pose`` (Pose),
    ``obb`` (OBB), else ``det``."""
    head = (yaml.get("head") or [[None, None, None]])[-1]
    module = str(head[2]) if isinstance(head, list) and len(head) > 2 else ""
    return next((task for prefix, task in HEAD_TASKS if module.startswith(prefix)), "det")


def task_of(ckpt: dict[str, Any] | UltralyticsCheckpoint) -> str | None:
    """The task a run's checkpoint records (checkpoints from before the record, and ultralytics ``.pt``
    files: recognised by content)."""
    if isinstance(ckpt, UltralyticsCheckpoint):
        return task_of_yaml(ckpt.yaml)
    if isinstance(ckpt.get("task"), str):
        return ckpt["task"]
    if "model_yaml" in ckpt or "detector_yaml" in ckpt or \
            str((ckpt.get("hyper_parameters") or {}).get("yaml", "")).endswith((".yaml", ".yml")):
        return "det"
    if "name" in (ckpt.get("hyper_parameters") or {}):
        return "cls"
    return None


def load_run_weights(model: nn.Module, state: dict[str, Any], error: str) -> nn.Module:
    """Load a run's network weights from its Lightning ``state_dict`` into ``model`` (strictly): the
    EMA's when the run kept one, else the live ones; CheckpointError ``error (why)``."""
    try:
        model.load_state_dict(lightning_weights(state), strict=True)
    except RuntimeError as e:
        raise CheckpointError(f"{error} ({str(e).splitlines()[0]})") from None
    return model
