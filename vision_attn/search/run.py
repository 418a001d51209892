"""``vision-attn search`` as a function: check the space and the storage, join or create the study, run
trials until its quota is met, and write the Pareto front. Every worker of a study runs this same call
(the same config, space and output folder, on a file system they share); nothing is created before the
space and the storage have been checked.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import optuna

from vision_attn.errors import ConfigError
from vision_attn.io.atomic import write_json
from vision_attn.search.front import Front, build_front, write_front
from vision_attn.search.reseed import reseed_front
from vision_attn.search.space import read_space
from vision_attn.search.study import Heartbeat, Objective, StudyHandle, open_storage, open_study, run_worker
from vision_attn.search.trial import SearchSetup, train_trial
from vision_attn.ablation.plan import read_config
from vision_attn.tasks.registry import get_task

__all__ = ["SearchResult", "run_search"]


@dataclass
class SearchResult:
    study: optuna.Study
    front: Front | None  # None when no trial has finished
    files: dict[str, Path]
    ran: int  # trials this worker ran
    reseeded: list[dict[str, Path]] = field(default_factory=list)  # the ablation reports of --reseed


def run_search(config: str, space: str | os.PathLike, *, trials: int, out: str | os.PathLike,
               storage: str | None = None, study: str | None = None, sampler: str = "tpe", pruner: str = "halving",
               seed: int = 0, epochs: int | None = None, extra: Sequence[str] = (), latency: bool = True,
               heartbeat: Heartbeat = Heartbeat(), echo: Callable[[str], None] = print, reseed: int = 0,
               jobs: int = 1, objective: Callable[[SearchSetup], Objective] = train_trial) -> SearchResult:
    """Search ``space`` on the training config ``config`` for ``trials`` trials in all (whichever worker runs
    them); ``objective`` makes each trial's objective (the training; tests give a cheap one). ``reseed`` N:
    then re-train each configuration of the front and none over N seeds (`ablate`, ``jobs`` at a time)."""
    if trials < 1:
        raise ConfigError(f"--trials {trials}: give at least 1")
    if epochs is not None and epochs < 1:
        raise ConfigError(f"--epochs {epochs}: give at least 1")
    out = Path(out).absolute()  # the run folders recorded in the study: any worker finds them
    path, task, cfg = read_config(config)
    primary = get_task(task).primary  # the objective: the task's primary metric (Task.primary)
    space_ = read_space(space, config)
    if storage is not None:  # checked before anything is written
        store = open_storage(storage, out, heartbeat)
    out.mkdir(parents=True, exist_ok=True)
    if storage is None:
        store = open_storage(None, out, heartbeat)
    max_epochs = epochs or int((cfg.get("trainer") or {}).get("max_epochs") or 1)
    identity = {"task": task, "config_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "space": space_.to_json(), "seed": seed, "epochs": epochs, "extra": list(extra),
                "metric": primary.key}  # not --trials: a study is extended by a larger one
    name = study or f"search_{path.stem}"
    handle: StudyHandle = open_study(store, name, identity, trials=trials, sampler=sampler, pruner=pruner,
                                     max_epochs=max_epochs)
    write_json(out / "search.json", {"study": name, "storage": "default" if storage is None else "given",
                                     "config": str(path), **identity})
    setup = SearchSetup(path, task, cfg, space_, out, seed=seed, epochs=epochs, extra=list(extra), echo=echo)
    echo(f"search {name}: {trials} trials of {space_.size() or 'a continuous'} configurations; "
         f"maximising {primary.label}, minimising GFLOPs; runs in {out / 'runs'}")
    ran = run_worker(handle, objective(setup), echo=echo)
    if not handle.study.best_trials:
        return SearchResult(handle.study, None, {}, ran)
    front = build_front(handle.study, setup.metric, latency=latency)
    result = SearchResult(handle.study, front, write_front(front, handle.study, out), ran)
    if reseed:
        result.reseeded = [files for _, files in reseed_front(front, setup, seeds=reseed, jobs=jobs,
                                                              latency=latency, echo=echo)]
    return result
