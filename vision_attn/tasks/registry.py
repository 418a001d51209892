"""The tasks vision_attn trains, by name, and what the command line and the tools after training call.

``TASKS`` maps ``cls``, ``det``, ``seg``, ``pose`` and ``obb`` to their :class:`~vision_attn.tasks.task.Task`. The functions here
take a task by name: :func:`train` (``vision-attn train TASK``), :func:`parse_train_config`,
:func:`dump_config`, :func:`build_train_parser`, and :func:`load_run`, the one loader of a trained run
that ``eval``, ``predict``, ``flops``, ``compare`` and ``export`` share: it reads the task and the model
description from the checkpoint (:func:`task_of_run`: the task alone).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from vision_attn.errors import CheckpointError, ConfigError
from vision_attn.io.resources import resolve_path
from vision_attn.io.yaml import DETECTOR_LIMITS, read_yaml
from vision_attn.tasks import config as _config
from vision_attn.tasks.classify.fit import CLASSIFY
from vision_attn.tasks.detect.fit import DETECT
from vision_attn.tasks.obb.fit import OBB_TASK
from vision_attn.tasks.pose.fit import POSE
from vision_attn.tasks.runner import TrainResult, run_training
from vision_attn.tasks.segment.fit import SEGMENT
from vision_attn.tasks.runs import Run, read_run_checkpoint, task_of, task_of_yaml
from vision_attn.tasks.task import Echo, Task

__all__ = ["TASKS", "get_task", "register_task", "train", "parse_train_config", "dump_config", "build_train_parser",
           "load_run", "task_of_run", "task_of_config", "task_of_export_kind", "task_of_network"]

TASKS: dict[str, Task] = {t.name: t for t in (CLASSIFY, DETECT, SEGMENT, POSE, OBB_TASK)}


def register_task(task: Task, *, replace: bool = False) -> Task:
    """Add ``task`` to :data:`TASKS` under its name (``vision-attn train|eval|predict NAME`` and
    :func:`load_run` then know it); a name already taken is a ConfigError unless ``replace``."""
    if not isinstance(task, Task):
        raise ConfigError(f"register_task({task!r}): give a vision_attn.tasks.task.Task record")
    if task.name in TASKS and TASKS[task.name] is not task and not replace:
        raise ConfigError(f"task {task.name!r} is registered already; give the new task another name, or "
                          "register_task(task, replace=True)")
    TASKS[task.name] = task
    return task


def task_of_config(model: Mapping[str, Any], base: Path) -> str | None:
    """The task a training config's ``model`` section trains (its file in the folder ``base``): a detector
    YAML's network by its head (:func:`~vision_attn.tasks.runs.task_of_yaml`), a ``create_model`` name a
    classifier; None when it names neither. A YAML that is not there counts as a detector's (the training
    itself names the missing file)."""
    if "yaml" in model:
        source = resolve_path(str(model["yaml"]), base=base, kinds=("model",))
        if source is None or not source.is_file():
            return DETECT.name
        return task_of_yaml(read_yaml(source, DETECTOR_LIMITS, what="detector YAML"))
    return CLASSIFY.name if "name" in model else None


def task_of_network(network: torch.nn.Module) -> Task | None:
    """The first registered task that trains ``network`` (a YAML network: its ``task``, the head's family, among
    the task module's ``heads``); None for any other network (a classifier)."""
    family = getattr(network, "task", None)
    for task in TASKS.values():
        if family is not None and family in getattr(task.module, "heads", ()):
            return task
    return None


def task_of_export_kind(kind: str) -> Task:
    """The first registered task whose runs export as ``kind`` (``classifier``, ``detector``, ``segmenter``,
    ``keypoints``, ``rotated``)."""
    for task in TASKS.values():
        if task.export_kind == kind:
            return task
    raise ConfigError(f"no registered task exports as a {kind}; choose one of "
                      f"{', '.join(sorted({t.export_kind for t in TASKS.values()}))}")


def get_task(name: str | Task) -> Task:
    """The task called ``name`` (``cls``, ``det`` or ``seg``)."""
    if isinstance(name, Task):
        return name
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}: choose one of {', '.join(TASKS)}")
    return TASKS[name]


def train(task: str, config: Sequence[str] | Mapping[str, Any] | Any = (), *, echo: Echo | None = None,
          callbacks: Sequence[Any] = ()) -> TrainResult:
    """Train ``task`` as ``config`` says (arguments, a nested dict or a parsed configuration); ``callbacks``:
    Lightning callbacks added to the run's own."""
    return run_training(config, get_task(task), echo=echo, callbacks=callbacks)


def build_train_parser(task: str | Task = "cls"):
    """The jsonargparse parser of ``vision-attn train TASK``."""
    return _config.build_train_parser(get_task(task))


def parse_train_config(args: Sequence[str] | Mapping[str, Any] | None = None, task: str | Task = "cls"):
    """A validated configuration of ``task`` from command-line arguments or a nested dict (see
    :func:`vision_attn.tasks.config.parse_train_config`)."""
    return _config.parse_train_config(args, get_task(task))


def dump_config(cfg, *, run_flags: bool = True, task: str | Task = "cls") -> str:
    """The full configuration of ``task`` as YAML (what ``--print-config`` prints)."""
    return _config.dump_config(cfg, get_task(task), run_flags=run_flags)


def _recorded_task(ckpt: Any, file: Path) -> str:
    found = task_of(ckpt)
    if found is None:
        raise CheckpointError(f"{file}: a checkpoint without a model name in its hyper-parameters (not a vision_attn "
                              "run); for plain weights use create_model(name, pretrained=PATH)")
    return found


def task_of_run(path: str | os.PathLike) -> Task:
    """The registered task of the trained run at ``path`` (a run folder, or its checkpoint), as its checkpoint
    records it; nothing is built."""
    ckpt, file = read_run_checkpoint(path)
    return get_task(_recorded_task(ckpt, file))


def load_run(path: str | os.PathLike, *, task: str | None = None, device: str | torch.device = "cpu",
             weights: bool = True) -> Run:
    """The trained run at ``path`` (a run folder, or its ``best.ckpt``/``last.ckpt``): the task's network
    rebuilt from the checkpoint's model description on ``device``, with the run's weights (EMA when
    kept) unless ``weights`` is False. ``task``: the task the caller expects (an error names the other)."""
    ckpt, file = read_run_checkpoint(path)
    found = _recorded_task(ckpt, file)
    if task is not None and found != task:
        raise CheckpointError(f"{file}: the checkpoint of a {found} run, not of a {task} run; use `vision-attn eval "
                              f"{found}` / `predict {found}`")
    return get_task(found).load(ckpt, file, device=device, weights=weights)
