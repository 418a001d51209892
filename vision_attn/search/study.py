"""The Optuna study of a search: storage, the multi-objective study (the task's primary metric up,
GFLOPs down), its pruning side study, and the worker loop that any number of processes run on it.

Storage: ``None`` is a SQLite file ``study.db`` in the output folder; a URL (``sqlite:///...``,
``postgresql://...``, ``mysql://...``) is Optuna's RDBStorage with a heartbeat, so that a trial whose worker
died (SIGKILL, a lost node) is marked FAIL once its heartbeat is ``grace_s`` old and queued again with the
same parameters (Optuna's ``RetryHeartbeatStaleTrialCallback``); anything else is a file path: Optuna's
JournalStorage (a journal file on a shared file system, no server; no heartbeat: a dead worker's trial
stays RUNNING). A storage that cannot be reached is a one-line ConfigError before any study exists. A
worker stopped by SIGTERM (a scheduler's preemption), whose training wrote a checkpoint, queues its trial
again the same way on any storage.

Pruning: Optuna does not take intermediate values of a multi-objective trial (``Trial.report`` raises), so
each trial has a twin in the single-objective study ``NAME:pruning`` of the same storage, to which its
per-epoch validation is reported and whose pruner (successive halving or Hyperband) decides.

Quota: ``trials`` counts the fresh trials of the study, whichever worker ran them; a retry of a dead
worker's trial is not fresh. Trial numbers are unique across workers, so a trial numbered past the quota
(two workers asking at the same moment) ends at once as ``surplus`` (state FAIL, no training).
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import optuna
import sqlalchemy.exc
from optuna.exceptions import DuplicatedStudyError, ExperimentalWarning
from optuna.storages import (BaseStorage, JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback,
                             fail_stale_trials)
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, Trial, TrialState

from vision_attn.errors import ConfigError, TrainingStopped

__all__ = ["HEARTBEAT_S", "GRACE_S", "STUDY_FILE", "Heartbeat", "StudyHandle", "open_storage", "open_study",
           "frozen", "original_number", "is_surplus", "run_worker"]

STUDY_FILE = "study.db"
HEARTBEAT_S = 30
GRACE_S = 120
_SURPLUS = "surplus"

Objective = Callable[[Trial, "StudyHandle"], tuple[float, float]]


@dataclass(frozen=True)
class Heartbeat:
    """How often a running trial says it is alive, and after how long without a word it is failed and retried."""

    interval_s: int = HEARTBEAT_S
    grace_s: int = GRACE_S


def _shown(url: str) -> str:
    """The URL without its password."""
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL sqlalchemy reads: shown as given
        return url


def open_storage(storage: str | None, out: Path, heartbeat: Heartbeat = Heartbeat()) -> BaseStorage:
    """The Optuna storage ``storage`` names (see the module's docstring); ``out`` holds the default SQLite file."""
    if storage is None:
        storage = f"sqlite:///{(out / STUDY_FILE).absolute()}"
    if "://" not in storage:  # a journal file
        path = Path(storage).expanduser()
        if not path.parent.is_dir():
            raise ConfigError(f"--storage {storage}: the folder {path.parent} of this journal file does not exist; "
                              "create it (on a file system every worker sees) or give a database URL")
        try:
            return JournalStorage(JournalFileBackend(str(path)))
        except OSError as e:
            raise ConfigError(f"--storage {storage}: cannot open the journal file ({e.strerror or e})") from None
    engine: dict[str, Any] = {"pool_pre_ping": True}
    if storage.startswith("sqlite"):
        engine["connect_args"] = {"timeout": 120}  # several workers on one file wait for its lock
    try:
        for attempt in range(5):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ExperimentalWarning)
                    return RDBStorage(storage, engine_kwargs=engine, heartbeat_interval=heartbeat.interval_s,
                                      grace_period=heartbeat.grace_s,
                                      heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=3))
            except sqlalchemy.exc.SQLAlchemyError as e:
                # workers that start together create the tables together: one wins, the others read them
                racing = isinstance(e, (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError)) or \
                    "already exists" in str(e)
                if attempt == 4 or not racing:
                    raise
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")
    except (sqlalchemy.exc.SQLAlchemyError, ImportError, ValueError, OSError) as e:
        first = str(getattr(e, "orig", None) or e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"--storage {_shown(storage)}: cannot reach the database ({first}); check the URL, that "
                          "the server runs and this machine may connect, or leave --storage out for a SQLite file "
                          "in the output folder") from None


def _pruner(name: str, max_epochs: int) -> optuna.pruners.BasePruner:
    if name == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max(max_epochs, 1), reduction_factor=3)
    if name == "none":
        return optuna.pruners.NopPruner()
    raise ConfigError(f"--pruner {name}: choose halving, hyperband or none")


def _sampler(name: str, space_json: dict[str, Any], seed: int | None) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        if space_json.get("lr") is not None:
            raise ConfigError("--sampler grid: the space has a continuous lr range; drop lr from the space or use tpe")
        grid = {"block": list(space_json["blocks"]), "site": list(space_json["sites"])}
        if space_json.get("scales"):
            grid["scale"] = list(space_json["scales"])
        return optuna.samplers.GridSampler(grid, seed=seed)
    raise ConfigError(f"--sampler {name}: choose tpe, nsga2, random or grid")


@dataclass
class StudyHandle:
    """A search's study, its pruning side study and what every worker must agree on (``identity``)."""

    study: optuna.Study
    pruning: optuna.Study
    identity: dict[str, Any]
    trials: int

    @property
    def name(self) -> str:
        return self.study.study_name


def _fingerprint(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def open_study(storage: BaseStorage, name: str, identity: dict[str, Any], *, trials: int, sampler: str = "tpe",
               pruner: str = "halving", max_epochs: int = 1, seed: int | None = None) -> StudyHandle:
    """Create the study ``name`` in ``storage``, or join it when it holds the same search (``identity``: the
    config, the space, the task's metric); another search under that name is a ConfigError."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # the search prints its own lines per trial
    logging.getLogger("optuna").setLevel(logging.ERROR)
    fingerprint = _fingerprint(identity)
    try:
        study = optuna.create_study(storage=storage, study_name=name, directions=["maximize", "minimize"],
                                    sampler=_sampler(sampler, identity["space"], seed))
        study.set_user_attr("search", identity)
        study.set_user_attr("fingerprint", fingerprint)
    except DuplicatedStudyError:
        study = optuna.load_study(storage=storage, study_name=name, sampler=_sampler(sampler, identity["space"], seed))
        held = study.user_attrs.get("fingerprint")
        for _ in range(50):  # the creating worker writes its attributes just after creating the study
            if held is not None:
                break
            time.sleep(0.1)
            held = optuna.load_study(storage=storage, study_name=name).user_attrs.get("fingerprint")
        if held != fingerprint:
            other = study.user_attrs.get("search") or {}
            diff = [k for k in identity if other.get(k) != identity[k]] or ["its settings"]
            raise ConfigError(f"--study {name}: this storage holds another search under that name ({', '.join(diff)} "
                              "differ); give another --study, or the same config and space")
    if len(study.directions) != 2:
        raise ConfigError(f"--study {name}: a study of this storage that is not a search (it has "
                          f"{len(study.directions)} objective(s)); give another --study")
    side = optuna.create_study(storage=storage, study_name=f"{name}:pruning", direction="maximize",
                               pruner=_pruner(pruner, max_epochs), load_if_exists=True)
    return StudyHandle(study, side, identity, trials)


def frozen(trial: Trial) -> FrozenTrial:
    """The stored record of a running trial (its system attributes: a retry's original number)."""
    return next(t for t in trial.study.get_trials(deepcopy=False) if t.number == trial.number)


def original_number(trial: FrozenTrial) -> int:
    """The number of the trial a retry repeats (its own number when it is not a retry)."""
    return int(trial.system_attrs.get("failed_trial", trial.number))


def is_surplus(trial: FrozenTrial) -> bool:
    return bool(trial.user_attrs.get(_SURPLUS))


def _fresh(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    return [t for t in trials if "failed_trial" not in t.system_attrs and not is_surplus(t)]


class _Surplus(Exception):
    """A trial numbered past the quota: ended at once (FAIL, user attribute ``surplus``)."""


def _heartbeat_s(storage: BaseStorage) -> int | None:
    """The storage's heartbeat interval (a database's; None for a journal file)."""
    interval = getattr(storage, "get_heartbeat_interval", None)  # RDBStorage, also behind Optuna's cache
    return interval() if interval is not None else None


def run_worker(handle: StudyHandle, objective: Objective, *, echo: Callable[[str], None] = print) -> int:
    """Run trials of the study until its quota is met and no trial is waiting; with a heartbeat, wait for the
    trials other workers run (one of them may go stale and come back as a retry). Returns the trials run here."""
    study, storage = handle.study, handle.study._storage
    beat = _heartbeat_s(storage)
    ran = 0

    stopped: list[int] = []

    def body(trial: Trial) -> tuple[float, float]:
        nonlocal ran
        if "failed_trial" not in frozen(trial).system_attrs:
            before = [t for t in _fresh(study.get_trials(deepcopy=False)) if t.number < trial.number]
            if len(before) >= handle.trials:
                trial.set_user_attr(_SURPLUS, True)
                raise _Surplus()
        ran += 1
        try:
            return objective(trial, handle)
        except TrainingStopped:
            stopped.append(trial.number)
            raise

    while True:
        if beat:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                fail_stale_trials(study)
        trials = study.get_trials(deepcopy=False)
        waiting = sum(t.state == TrialState.WAITING for t in trials)
        if waiting == 0 and len(_fresh(trials)) >= handle.trials:
            if beat and any(t.state == TrialState.RUNNING for t in trials):
                time.sleep(min(beat, 5))
                continue
            return ran
        try:
            study.optimize(body, n_trials=1, catch=(_Surplus,), gc_after_trial=True)
        except TrainingStopped:  # SIGTERM (a scheduler's preemption), Ctrl-C: the training wrote a checkpoint
            for t in study.get_trials(deepcopy=False):
                if t.number in stopped:  # queued again: the next worker continues its run folder
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", ExperimentalWarning)
                        RetryHeartbeatStaleTrialCallback()(study, t)
            raise
