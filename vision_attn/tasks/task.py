"""What one task (``cls``, ``det``) tells the shared machinery: its LightningModule and DataModule
classes (the ``model`` and ``data`` sections of its config), the config keys that name files, how the
runner builds and finishes a run, and how a trained run is loaded back. The tasks are collected in
:mod:`vision_attn.tasks.registry`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Task", "Echo"]

Echo = Callable[[str], None]


@dataclass(frozen=True)
class Task:
    """One task.

    ``name``: ``cls`` or ``det`` (the word after ``vision-attn train``); ``title``: what it trains;
    ``module`` / ``datamodule``: the Lightning classes whose arguments are the ``model`` / ``data``
    sections; ``filled``: ``model`` arguments the data set fills in; ``paths``: dotted config keys that
    name files, with the kinds of shipped config they may name (see :func:`vision_attn.io.resources.resolve_path`);
    ``monitor``: the validation metric ``best.ckpt`` maximises; ``build(cfg, say) -> (module, datamodule)``;
    ``shadow(module, cfg) -> (network, label)`` rebuilds the trained network's architecture (the
    runner builds it on the meta device to count its FLOPs); ``panels``: the curves ``plot_curves``
    draws; ``report(run, callback_metrics, module, datamodule, cfg, *, flops, best, common) -> metrics``
    writes the task's own figures and returns ``metrics.json``'s content (``common``: the entries
    every task writes); ``summary(metrics) -> str`` is the last progress line;
    ``load(ckpt, path, device, weights) -> Run`` rebuilds a trained run from its checkpoint;
    ``lr_monitor``: log the schedulers' rates (tasks that set rates themselves log them).
    """

    name: str
    title: str
    module: type
    datamodule: type
    filled: frozenset[str]
    monitor: str
    build: Callable[[Any, Echo], tuple[Any, Any]]
    shadow: Callable[[Any, Any], tuple[Any, str]]
    panels: Any
    report: Callable[..., dict[str, Any]]
    summary: Callable[[dict[str, Any]], str]
    load: Callable[..., Any]
    paths: dict[str, tuple[str, ...]] = field(default_factory=dict)
    lr_monitor: bool = True
