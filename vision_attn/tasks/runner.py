"""Training end to end: configuration -> data -> module -> Lightning Trainer -> run folder.

:func:`run_training` holds what every task shares (run folder rules, resume, seeding, threads,
loggers, atomic checkpoints, the final validation); a :class:`~vision_attn.tasks.task.Task` supplies the
rest: building the data and module, the metric checkpoints follow, and the end-of-run report (each
task's ``fit.py``); the end of a run (final weights, FLOPs of the network, curves, ``metrics.json``) is
written here, with what the task adds. Under DDP Lightning starts the other processes by
running the same command line again; they find the run folder the first process prepared, train their
share, and leave the writing of files to it.

Resume is exact (docs/training.md, "Resume"): the checkpoint to continue from is read and checked
before anything is written (:func:`read_resume_checkpoint`), ``last.ckpt`` is written at batch starts
by :class:`~vision_attn.tasks.checkpointer.Checkpointer`, which also honours stop signals,
:class:`~vision_attn.tasks.resume_state.ResumeState` carries the random streams and epoch sums, the
data modules the loader position (:mod:`vision_attn.tasks.data_module`), and the logs continue
(:mod:`vision_attn.tasks.logs`); each resume is recorded in ``resumes.json``.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

import torch
from lightning_fabric.utilities.exceptions import MisconfigurationException

from vision_attn.analysis.flops import count_flops
from vision_attn.data import end_loader_workers, unwrap_worker_error
from vision_attn.errors import CheckpointError, ConfigError, TrainingError, VisionAttnError
from vision_attn.io.atomic import save_torch, write_json, write_text
from vision_attn.io.state_dict import read_checkpoint
from vision_attn.kernels import accelerate, current_plan, needs_kernels, set_kernel_plan
from vision_attn.tasks.checkpoint_io import AtomicCheckpointIO
from vision_attn.tasks.checkpointer import Checkpointer
from vision_attn.tasks.config import dump_config, parse_train_config, to_dict
from vision_attn.tasks.kernel_plan import choose_kernel_plan, judged_training_plan, training_dtype
from vision_attn.tasks.logs import run_loggers
from vision_attn.tasks.plots import epoch_history, plot_curves
from vision_attn.tasks.resume_state import ResumeState
from vision_attn.tasks.run_folder import RunFolder
from vision_attn.tasks.signals import STOP_GRACE_S, StopRequest
from vision_attn.tasks.task import Echo, Task

__all__ = ["TrainResult", "run_training", "save_final_weights", "run_metrics", "metric_value"]

T = TypeVar("T")


@dataclass
class TrainResult:
    """Where a run was written and what it measured (the content of its ``metrics.json``)."""

    run_dir: Path
    metrics: dict[str, Any]


def _global_rank() -> int:
    for key in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


def _quiet_lightning() -> None:
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for pattern in (r".*does not have many workers.*", r".*smaller than the logging interval.*",
                    r".*Experiment logs directory .* exists and is not empty.*",
                    r".*Checkpoint directory .* exists and is not empty.*",
                    r".*could not find the monitored key in the returned metrics.*",  # no validation yet: handled
                    r".*your dataloader is not resumable.*",  # the data module keeps the position (data_module.py)
                    r".*is an invalid version and will not be supported.*",
                    r".*isinstance\(treespec, LeafSpec\)` is deprecated.*"):
        warnings.filterwarnings("ignore", message=pattern)


def _callbacks(run: RunFolder, progress_bar: bool, task: Task, checkpoint: Mapping[str, Any]) -> list:
    from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint, RichProgressBar

    best = ModelCheckpoint(dirpath=run.path, filename="best", monitor=task.primary.logged, mode="max", save_top_k=1,
                           auto_insert_metric_name=False, enable_version_counter=False)
    # ResumeState first: at a resumed run's first batch it restores the state the Checkpointer saves
    stop = StopRequest(grace_s=checkpoint.get("stop_grace_s", STOP_GRACE_S))
    out: list = [ResumeState(), Checkpointer(run, every_n_steps=checkpoint.get("every_n_steps"),
                                             every_minutes=checkpoint.get("every_minutes"), stop=stop), best]
    if task.lr_monitor:
        # at logged steps, after the Checkpointer: nothing is logged between a checkpoint and its batch
        out.append(LearningRateMonitor(logging_interval="step"))
    if progress_bar:
        out.append(RichProgressBar(leave=True))
    return out


def _checkpoint_options(cfg) -> dict[str, Any]:
    options = dict(to_dict(cfg).get("checkpoint") or {})
    n, minutes = options.get("every_n_steps"), options.get("every_minutes")
    if n is not None and n < 1:
        raise ConfigError(f"config key checkpoint.every_n_steps={n}: give 1 or more (or null)")
    if minutes is not None and not minutes > 0:
        raise ConfigError(f"config key checkpoint.every_minutes={minutes}: give a positive number (or null)")
    grace = options.get("stop_grace_s")
    if grace is not None and not grace > 0:
        raise ConfigError(f"config key checkpoint.stop_grace_s={grace}: give a positive number of seconds (or null)")
    return options


@dataclass(frozen=True)
class Resumed:
    """The checkpoint a run continues from, read and checked before anything is written."""

    path: Path
    checkpoint: dict[str, Any]

    @property
    def step(self) -> int:
        return int(self.checkpoint["global_step"])

    @property
    def epoch(self) -> int:
        return int(self.checkpoint.get("epoch", 0))


def read_resume_checkpoint(path: str | os.PathLike, run: RunFolder) -> Resumed:
    """The training checkpoint at ``path``; a damaged or foreign file is a CheckpointError naming it
    (and, for the run's ``last.ckpt``, how to resume from ``previous.ckpt``)."""
    file = Path(path)
    fallback = (f"; to resume from the checkpoint before it: --ckpt_path {run.previous}"
                if file.absolute() == run.last.absolute() and run.previous.is_file() else "")
    try:
        ckpt = read_checkpoint(file)
    except CheckpointError as e:
        raise CheckpointError(f"{e}{fallback}") from None
    if not isinstance(ckpt, dict) or not {"state_dict", "loops", "global_step"} <= set(ckpt):
        raise CheckpointError(f"{file}: not a training checkpoint of a run (no loops, state_dict and global_step)"
                              f"{fallback}")
    return Resumed(file, ckpt)


def _record_resume(run: RunFolder, resumed: Resumed) -> list[dict[str, Any]]:
    """Add this resume to ``resumes.json``; return the list."""
    try:
        history = json.loads(run.resumes.read_text()) if run.resumes.is_file() else []
    except (OSError, ValueError):
        history = []
    history.append({"checkpoint": str(resumed.path), "step": resumed.step, "epoch": resumed.epoch,
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    write_json(run.resumes, history)
    return history


def run_training(config: Sequence[str] | Mapping[str, Any] | Any, task: Task, *,
                 echo: Echo | None = None, callbacks: Sequence[Any] = ()) -> TrainResult:
    """Train ``task`` as ``config`` says (arguments, a nested dict or a parsed configuration of that
    task) and write the run folder. ``callbacks``: Lightning callbacks added to the run's own (a search's
    pruning reporter)."""
    start = time.perf_counter()
    say: Echo = echo if echo is not None and _global_rank() == 0 else (lambda line: None)
    cfg = config if hasattr(config, "as_dict") else parse_train_config(config, task)
    threads, plan = torch.get_num_threads(), current_plan()
    try:
        with warnings.catch_warnings():  # the filters below stay inside this call
            _quiet_lightning()
            return _train(cfg, say, start, task, list(callbacks))
    finally:
        end_loader_workers()  # an error left a persistent loader's workers running: they ignore SIGTERM
        torch.set_num_threads(threads)
        set_kernel_plan(plan)


def _named_config_error(section: str, e: Exception, keys: Sequence[str] = ()) -> ConfigError:
    """A library's rejection of a configured value as one line naming the key (``trainer.max_epochs``):
    the first of ``keys`` its message names, else the section."""
    text = " ".join(str(e).split()) or type(e).__name__
    named = [k for k in keys if re.search(rf"\b{re.escape(k)}\b", text)]
    where = f"config key {section}.{named[0]}" if named else f"the {section} configuration"
    return ConfigError(f"{where} was rejected: {text}")


def _rejected_as_config_error(section: str, make: Callable[[], T], keys: Sequence[str] = (),
                              kinds: tuple[type[Exception], ...] = (ValueError, MisconfigurationException)) -> T:
    """``make()``, with a library's rejection (``kinds``) of the ``section``'s values (not vision_attn's own
    errors) turned into a ConfigError."""
    try:
        return make()
    except VisionAttnError:
        raise
    except kinds as e:
        raise _named_config_error(section, e, keys) from None


def _train(cfg, say: Echo, start: float, task: Task, extra_callbacks: list[Any]) -> TrainResult:
    import pytorch_lightning as pl

    run = RunFolder(Path(cfg.runs_dir) / cfg.name)
    ckpt_path = cfg.ckpt_path
    main_process = _global_rank() == 0
    if ckpt_path is None and cfg.resume:
        run.check(resume=True, overwrite=False, main_process=main_process)
        ckpt_path = str(run.last)
    if ckpt_path is not None and not Path(ckpt_path).is_file():
        raise TrainingError(f"--ckpt_path {ckpt_path}: no such checkpoint file")
    checkpoint_options = _checkpoint_options(cfg)
    # read (and check) the checkpoint before anything is written: a failed resume overwrites nothing
    resumed = read_resume_checkpoint(ckpt_path, run) if ckpt_path is not None else None
    trainer_cfg = dict(to_dict(cfg)["trainer"])
    accumulate = trainer_cfg.get("accumulate_grad_batches")
    if isinstance(accumulate, int) and accumulate < 1:  # Lightning divides by it unchecked
        raise ConfigError(f"config key trainer.accumulate_grad_batches={accumulate}: give 1 or more")
    progress = trainer_cfg.pop("enable_progress_bar", None) is not False
    loggers = run_loggers(run.path, resume_step=resumed.step if resumed is not None else None)
    checkpoint_io = AtomicCheckpointIO(keep_previous={run.last: run.previous},
                                       preloaded=(resumed.path, resumed.checkpoint) if resumed is not None else None)
    trainer = _rejected_as_config_error("trainer", lambda: pl.Trainer(  # before the run folder is touched
        **trainer_cfg, callbacks=_callbacks(run, progress, task, checkpoint_options) + extra_callbacks, logger=loggers,
        default_root_dir=run.path, enable_progress_bar=progress, plugins=[checkpoint_io],
        use_distributed_sampler=False), list(trainer_cfg),
        (ValueError, TypeError, MisconfigurationException))
    _check_schedule_length(trainer)
    if cfg.threads is not None and cfg.threads < 1:
        raise ConfigError(f"threads={cfg.threads}: give 1 or more (or null for PyTorch's default)")
    # --ckpt_path into a new folder starts it (a branch of another run); into a run's folder continues it
    continuing = cfg.resume or (ckpt_path is not None and main_process and run.path.is_dir()
                                and any(run.path.iterdir()))
    run.check(resume=continuing, overwrite=cfg.overwrite, main_process=main_process)
    pl.seed_everything(cfg.seed, workers=False, verbose=False)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    # the kernel plan of the run being continued (or prepared by the main process), else a new one
    recorded = Path(ckpt_path).parent / run.kernels.name if ckpt_path is not None else (
        run.kernels if not main_process else None)
    plan, why = choose_kernel_plan(cfg.kernels, trainer_cfg.get("deterministic"), recorded)
    set_kernel_plan(plan)

    # a bad model, YAML or data set fails before anything is written
    module, datamodule = _rejected_as_config_error("model/data", lambda: task.build(cfg, say))
    new_measured = plan.name == "measured" and not (recorded is not None and recorded.is_file())
    if new_measured and trainer.world_size == 1 and trainer.strategy.root_device.type == "cpu":
        with torch.random.fork_rng():  # the architecture, timed on a copy; the run's random stream untouched
            network, _ = task.shadow(module, cfg)
        plan, why = judged_training_plan(network, plan, cfg.data.batch_size, cfg.data.img_size,
                                         trainer_cfg.get("precision"))
        set_kernel_plan(plan)
    # the CPU fast paths; the plan decides at each call which kernels run (none of its dispatch where
    # it runs PyTorch's kernels alone)
    accelerate(module, kernels=needs_kernels(plan, training_dtype(trainer_cfg.get("precision"))))
    if main_process:
        run.check_room(checkpoint_bytes(module))
    run.prepare(resume=continuing, overwrite=cfg.overwrite, main_process=main_process)
    if trainer.is_global_zero:
        write_text(run.config, dump_config(cfg, task, run_flags=False))
        write_json(run.kernels, plan.as_dict())
        if resumed is not None:
            _record_resume(run, resumed)
    say(f"kernels: the {plan.name} plan ({why}), recorded in {run.kernels.name}")
    if resumed is not None:
        say(f"resuming from {ckpt_path} at step {resumed.step} (epoch {resumed.epoch})")
    fit_start = time.perf_counter()
    try:
        try:
            trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
        except VisionAttnError as e:
            raise unwrap_worker_error(e) from None
        except MisconfigurationException as e:  # a Trainer argument Lightning checks only once fitting starts
            raise _named_config_error("trainer", e, list(trainer_cfg)) from None
        if trainer.interrupted:
            raise KeyboardInterrupt
    except BaseException:
        if main_process and not continuing and trainer.global_step == 0:
            run.discard_unstarted()  # a start that failed before its first step leaves no run folder
        raise
    measured = dict(trainer.callback_metrics)  # the fit's (its training loss); a validation below replaces them
    final_best = None
    if trainer.limit_val_batches != 0 and module.last_val_step != trainer.global_step:
        # training stopped between validations (max_steps, max_time, check_val_every_n_epoch): measure the
        # final weights too
        _validate_final(trainer, module, datamodule)
        measured.update(trainer.callback_metrics)
        if not run.best.is_file():
            trainer.save_checkpoint(run.best)
            final_best = metric_value(measured, task.primary.logged)  # best.ckpt holds these weights
    fit_seconds = time.perf_counter() - fit_start
    if not trainer.is_global_zero:
        return TrainResult(run.path, {})
    metrics = _finish(run, trainer, module, datamodule, cfg, task,
                      run_metrics(run, trainer, cfg, start, fit_seconds, ckpt_path, ema=cfg.model.ema_decay is not None,
                                  task=task.name),
                      measured, final_best)
    say(f"{task.summary(metrics)} after {metrics['epochs']} epoch(s), {metrics['wall_time_s']:.0f} s; "
        f"run folder: {run.path}")
    return TrainResult(run.path, metrics)


def _validate_final(trainer, module, datamodule) -> None:
    """Validate the final weights, logged under the epoch that trained them: after fitting, Lightning's
    ``current_epoch`` counts the epochs run, one past the last epoch's index (the curves would plot this
    point an epoch after its training loss)."""
    progress = trainer.fit_loop.epoch_progress.current
    shift = 1 if progress.completed > 0 else 0
    progress.completed -= shift
    try:
        trainer.validate(module, datamodule=datamodule, verbose=False)
    finally:
        progress.completed += shift


def _check_schedule_length(trainer) -> None:
    """The learning-rate schedules run over the whole training (``estimated_stepping_batches``): a run
    without an end (``max_epochs: -1`` and no ``max_steps``, Lightning's "train until stopped") has none;
    a ConfigError before anything is written."""
    if trainer.fit_loop.max_epochs == -1 and trainer.max_steps == -1:
        raise ConfigError("config key trainer.max_epochs=-1 (train until stopped) leaves the learning-rate schedule "
                          "without a length: give trainer.max_steps N with it, or a number of epochs "
                          "(--trainer.max_epochs N)")


def checkpoint_bytes(module: torch.nn.Module) -> int:
    """About the size of a training checkpoint of ``module``: its state dict four times over (the weights,
    two optimizer moments, an EMA copy) and 1 MiB of loop state."""
    weights = sum(t.numel() * t.element_size() for t in module.state_dict().values() if isinstance(t, torch.Tensor))
    return 4 * weights + 2**20


def _finish(run: RunFolder, trainer, module, datamodule, cfg, task: Task, common: dict[str, Any],
            measured: Mapping[str, Any], final_best: float | None) -> dict[str, Any]:
    """Write model.safetensors, the curves, the task's own figures and metrics.json; return the metrics.
    ``measured``: the fit's logged metrics with the final validation's over them; ``final_best``: the
    monitored value of the final weights when best.ckpt holds them (no validation during the fit)."""
    save_final_weights(run, trainer, module)
    common["files"] = {k: v for k, v in common["files"].items() if (run.path / v).exists()}  # what was written
    with torch.device("meta"):  # a copy without memory or arithmetic: the trained one may be compiled
        shadow, label = task.shadow(module, cfg)
    flops = count_flops(shadow, cfg.data.img_size, name=label)
    plot_curves(epoch_history(run.csv), run.path, task.panels)
    callback = trainer.checkpoint_callback
    best = callback.best_model_score if callback is not None else None
    best = final_best if best is None else float(best)
    metrics = task.report(run, measured, module, datamodule, cfg, flops=flops, best=best, common=common)
    write_json(run.metrics, metrics)
    return metrics


def metric_value(metrics: Mapping[str, Any], key: str) -> float | None:
    v = metrics.get(key)
    if v is None:
        return None
    v = float(v)
    return None if math.isnan(v) else v


def save_final_weights(run: RunFolder, trainer, module) -> None:
    """Flush the loggers and write the module's evaluation (EMA) weights to ``model.safetensors``."""
    for logger in trainer.loggers:
        logger.save()
    net = module.eval_model()
    save_torch({k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}, run.weights)


def run_metrics(run: RunFolder, trainer, cfg, start: float, fit_seconds: float, ckpt_path: str | None,
                ema: bool, task: str) -> dict[str, Any]:
    """The entries of ``metrics.json`` every task writes (the task's name, epochs, steps, times, devices,
    files): ``task`` tells ``compare`` and the reports which record's primary metric ranks the run."""
    return {
        "task": task,
        "epochs": int(trainer.current_epoch),
        "max_epochs": trainer.max_epochs,
        "global_step": int(trainer.global_step),
        "wall_time_s": round(time.perf_counter() - start, 2),
        "fit_time_s": round(fit_seconds, 2),
        "resumed_from": ckpt_path,
        "resumes": json.loads(run.resumes.read_text()) if run.resumes.is_file() else [],
        "ema": ema,
        "precision": str(trainer.precision),
        "kernels": current_plan().name,
        "devices": trainer.num_devices,
        "world_size": trainer.world_size,
        "files": {"best": run.best.name, "last": run.last.name, "previous": run.previous.name,
                  "progress": run.progress.name, "resumes": run.resumes.name, "weights": run.weights.name,
                  "config": run.config.name, "kernels": run.kernels.name, "csv": "csv/metrics.csv",
                  "tensorboard": "tensorboard/"},
        "torch": torch.__version__,
    }
