"""One trial of a search: an ordinary run folder trained by the same code as ``vision-attn train``
(:func:`vision_attn.tasks.registry.train`, in this process), its per-epoch validation reported to the pruning
side study, and its two objectives: the task's primary metric and the GFLOPs vision_attn's own counter finds
in the trained network (:func:`vision_attn.analysis.compare.compare`).

The run folder is ``OUT/runs/tNNNN`` by the trial's original number: a retry of a trial whose worker died
continues that folder from its ``last.ckpt`` (as ``ablate`` continues a stopped run), and a folder that
already finished is read, not trained again. A pruned trial stops training at the validation that pruned it;
its folder is a finished run of fewer epochs.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import optuna
from pytorch_lightning.callbacks import Callback

from vision_attn.ablation.execute import resume_args, run_state
from vision_attn.ablation.plan import RunSpec
from vision_attn.analysis.compare import compare, read_run_metrics
from vision_attn.errors import DataError
from vision_attn.search.space import SearchSpace, variant_arguments
from vision_attn.search.study import StudyHandle, frozen, original_number
from vision_attn.tasks.registry import get_task, train

__all__ = ["SearchSetup", "PruningReporter", "suggest", "trial_folder", "train_trial"]


@dataclass
class SearchSetup:
    """What every trial of a search shares: the training config (``cfg``: its contents), the space, the
    output folder and the arguments every training gets."""

    config: Path
    task: str
    cfg: dict[str, Any]
    space: SearchSpace
    out: Path
    seed: int = 0
    epochs: int | None = None
    extra: list[str] = field(default_factory=list)
    echo: Callable[[str], None] = print

    @property
    def metric(self) -> tuple[str, str]:
        """The metrics.json key the search maximises and its label (the task's primary metric)."""
        primary = get_task(self.task).primary
        return primary.key, primary.label


def suggest(trial: optuna.Trial, space: SearchSpace) -> dict[str, Any]:
    """The trial's block, site (absent for ``none``), scale and lr, drawn from ``space``."""
    params: dict[str, Any] = {"block": trial.suggest_categorical("block", list(space.blocks))}
    if params["block"] != "none":
        params["site"] = trial.suggest_categorical("site", list(space.sites))
    if space.scales:
        params["scale"] = trial.suggest_categorical("scale", list(space.scales))
    if space.lr is not None:
        params["lr"] = trial.suggest_float("lr", space.lr.low, space.lr.high, log=space.lr.log)
    return params


def trial_folder(setup: SearchSetup, number: int) -> Path:
    return setup.out / "runs" / f"t{number:04d}"


class PruningReporter(Callback):
    """Reports the task's monitored validation metric after each validation (step: epochs trained) to a trial
    of the pruning side study and, when its pruner says so, ends the training there (``pruned_at``: that epoch).
    Written for pytorch_lightning 2.x, whose Trainer refuses optuna-integration's callback (made for the
    ``lightning`` package)."""

    def __init__(self, trial: optuna.Trial, monitor: str) -> None:
        self.trial, self.monitor = trial, monitor
        self.values: dict[int, float] = {}
        self.pruned_at: int | None = None

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            return
        value = float(value)
        if math.isnan(value):
            value = 0.0
        epoch = int(trainer.current_epoch) + 1
        self.values[epoch] = value
        self.trial.report(value, step=epoch)
        if self.trial.should_prune():
            self.pruned_at = epoch
            trainer.should_stop = True


def _arguments(setup: SearchSetup, params: dict[str, Any], folder: Path) -> list[str]:
    args = ["--config", str(setup.config), "--runs_dir", str(folder.parent), "--name", folder.name,
            "--seed", str(setup.seed)]
    if setup.epochs is not None:
        args += ["--trainer.max_epochs", str(setup.epochs)]
    if params["block"] != "none":
        slug = re.sub(r"[^A-Za-z0-9]+", "_", str(params["site"])).strip("_")
        edits = setup.out / "edits" / f"{params['block'].lower()}-{slug}"  # one edit per block and site, reused
        args += variant_arguments(setup.cfg, setup.config, setup.task, params["block"], params["site"], edits)
    elif get_task(setup.task).insertion == "model":
        args += ["--model.attention", "none"]
    if "scale" in params:
        args += ["--model.scale", str(params["scale"])]
    if "lr" in params:
        args += ["--model.lr", repr(float(params["lr"]))]
    return args + list(setup.extra)


def train_trial(setup: SearchSetup) -> Callable[[optuna.Trial, StudyHandle], tuple[float, float]]:
    """The objective of a search: train the trial's configuration, return (primary metric, GFLOPs)."""

    def objective(trial: optuna.Trial, handle: StudyHandle) -> tuple[float, float]:
        params = suggest(trial, setup.space)
        number = original_number(frozen(trial))
        folder = trial_folder(setup, number)
        spec = RunSpec(params["block"], setup.seed, folder, tuple(_arguments(setup, params, folder)))
        trial.set_user_attr("run", str(folder))
        with warnings.catch_warnings():  # the side trial has no heartbeat of its own: its main trial has
            warnings.filterwarnings("ignore", message=".*Heartbeat of storage is supposed to be used.*")
            side = handle.pruning.ask()
        side.set_user_attr("trial", trial.number)
        reporter = PruningReporter(side, get_task(setup.task).primary.logged)
        status = run_state(spec)
        label = ", ".join(f"{k}={v}" for k, v in params.items())
        retry = f" (retry of trial {number})" if number != trial.number else ""
        setup.echo(f"trial {trial.number}{retry}: {label} -> {folder}")
        try:
            if status != "done":
                train(setup.task, [*spec.args, *resume_args(spec, status)], callbacks=[reporter])
            metrics = read_run_metrics(folder)
        except BaseException:
            handle.pruning.tell(side, state=optuna.trial.TrialState.FAIL)
            raise
        key, label_ = setup.metric
        if not isinstance(metrics.get(key), (int, float)):
            raise DataError(f"{folder}/metrics.json has no {key!r} ({label_}): is this a {setup.task} run?")
        (row,) = compare([folder], latency=False)
        value, gflops = float(metrics[key]), 2 * row.gmacs
        trial.set_user_attr("params", row.params)
        trial.set_user_attr("gflops", gflops)
        trial.set_user_attr("epochs", int(metrics.get("epochs") or 0))
        trial.set_user_attr("fit_time_s", float(metrics.get("fit_time_s") or 0.0))
        trial.set_user_attr("validation", {str(k): v for k, v in reporter.values.items()})
        if reporter.pruned_at is not None:
            handle.pruning.tell(side, state=optuna.trial.TrialState.PRUNED)
            trial.set_user_attr(key, value)
            setup.echo(f"trial {trial.number}: pruned after epoch {reporter.pruned_at} ({label_} {value:.4f})")
            raise optuna.TrialPruned(f"pruned after epoch {reporter.pruned_at}")
        handle.pruning.tell(side, value)
        setup.echo(f"trial {trial.number}: {label_} {value:.4f}, {gflops:.4g} GFLOPs, {row.params:,} parameters")
        return value, gflops

    return objective
