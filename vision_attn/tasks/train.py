"""Training end to end: configuration -> data -> module -> Lightning Trainer -> run folder.

:func:`run_training` holds what every task shares (run folder rules, resume, seeding, threads,
loggers, atomic checkpoints, the final validation); a :class:`TrainTask` supplies the rest: building
the data and module, the metric checkpoints follow, and the end-of-run report.
:func:`train_classifier` is what ``vision-attn train cls`` runs (``train det``:
:func:`vision_attn.tasks.det_train.train_detector`). Under DDP Lightning starts the other processes by
running the same command line again; they find the run folder the first process prepared, train their
share, and leave the writing of files to it.
"""
from __future__ import annotations

import logging
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from vision_attn.data import unwrap_worker_error
from vision_attn.errors import ConfigError, TrainingError, VisionAttnError
from vision_attn.tasks.config import dump_config, parse_train_config, to_dict
from vision_attn.io.atomic import save_torch, write_json, write_text
from vision_attn.tasks.run_folder import RunFolder

__all__ = ["TrainResult", "TrainTask", "run_training", "train_classifier"]

Echo = Callable[[str], None]


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
                    r".*is an invalid version and will not be supported.*",
                    r".*isinstance\(treespec, LeafSpec\)` is deprecated.*"):
        warnings.filterwarnings("ignore", message=pattern)


@dataclass(frozen=True)
class TrainTask:
    """What one task adds to :func:`run_training`.

    ``build(cfg, say) -> (module, datamodule)``; ``monitor``: the validation metric ``best.ckpt`` maximises;
    ``finish(run, trainer, module, datamodule, cfg, start, fit_seconds, ckpt_path) -> metrics`` writes the
    task's files and ``metrics.json``; ``summary(metrics) -> str`` is the last progress line;
    ``lr_monitor``: log the schedulers' rates (tasks that set rates themselves log them).
    """

    name: str
    monitor: str
    build: Callable[[Any, Echo], tuple[Any, Any]]
    finish: Callable[..., dict[str, Any]]
    summary: Callable[[dict[str, Any]], str]
    lr_monitor: bool = True


def _callbacks(run: RunFolder, progress_bar: bool, task: TrainTask) -> list:
    from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint, RichProgressBar

    best = ModelCheckpoint(dirpath=run.path, filename="best", monitor=task.monitor, mode="max", save_top_k=1,
                           auto_insert_metric_name=False, enable_version_counter=False)
    # last.ckpt after every epoch: Lightning's save_last only writes it when best.ckpt improved
    last = ModelCheckpoint(dirpath=run.path, filename="last", monitor=None, save_top_k=1, save_on_train_epoch_end=True,
                           auto_insert_metric_name=False, enable_version_counter=False)
    out: list = [best, last]
    if task.lr_monitor:
        out.append(LearningRateMonitor(logging_interval="epoch"))
    if progress_bar:
        out.append(RichProgressBar(leave=True))
    return out


def train_classifier(config: Sequence[str] | Mapping[str, Any] | Any = (), *, echo: Echo | None = None) -> TrainResult:
    """Train as ``config`` says and write the run folder; return its path and final metrics.

    ``config``: command-line arguments (``["--config", "configs/classify/demo_digits.yaml",
    "--trainer.max_epochs", "3"]``), a nested dict (``{"name": ..., "model": {...}, "data": {...},
    "trainer": {...}}``) over the defaults, or a parsed configuration. ``echo`` receives progress lines
    (the command line prints them). Errors are :class:`~vision_attn.errors.VisionAttnError`\\ s.
    """
    return run_training(config, CLASSIFICATION, echo=echo)


def run_training(config: Sequence[str] | Mapping[str, Any] | Any, task: TrainTask, *,
                 echo: Echo | None = None) -> TrainResult:
    """Train ``task`` as ``config`` says (arguments, a nested dict or a parsed configuration of that
    task) and write the run folder."""
    start = time.perf_counter()
    say: Echo = echo if echo is not None and _global_rank() == 0 else (lambda line: None)
    cfg = config if hasattr(config, "as_dict") else parse_train_config(config, task.name)
    threads = torch.get_num_threads()
    try:
        with warnings.catch_warnings():  # the filters below stay inside this call
            _quiet_lightning()
            return _train(cfg, say, start, task)
    finally:
        torch.set_num_threads(threads)


def _build_classification(cfg, say: Echo) -> tuple[Any, Any]:
    from vision_attn.tasks.classification import ClassificationModule
    from vision_attn.tasks.datamodule import ClassificationDataModule

    data_cfg = to_dict(cfg)["data"]
    datamodule = ClassificationDataModule(**data_cfg)
    splits = datamodule.scan()
    say(f"data: {splits.summary()}")
    model_cfg = to_dict(cfg)["model"]
    module = ClassificationModule(**model_cfg, num_classes=len(splits.classes), img_size=data_cfg["img_size"],
                                  class_names=splits.classes)
    params = sum(p.numel() for p in module.model.parameters())
    say(f"model: {model_cfg['name']}, {params / 1e6:.2f} M parameters, {len(splits.classes)} classes, "
        f"{data_cfg['img_size']} px")
    return module, datamodule


def _train(cfg, say: Echo, start: float, task: TrainTask) -> TrainResult:
    import pytorch_lightning as pl
    from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger

    from vision_attn.tasks.checkpoint_io import AtomicCheckpointIO

    run = RunFolder(Path(cfg.runs_dir) / cfg.name)
    ckpt_path = cfg.ckpt_path
    if ckpt_path is None and cfg.resume:
        ckpt_path = str(run.last)
    if ckpt_path is not None and not Path(ckpt_path).is_file():
        raise TrainingError(f"--ckpt_path {ckpt_path}: no such checkpoint file")
    main_process = _global_rank() == 0
    if cfg.threads is not None and cfg.threads < 1:
        raise ConfigError(f"threads={cfg.threads}: give 1 or more (or null for PyTorch's default)")
    run.check(resume=cfg.resume or ckpt_path is not None, overwrite=cfg.overwrite, main_process=main_process)
    pl.seed_everything(cfg.seed, workers=False, verbose=False)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)

    module, datamodule = task.build(cfg, say)  # a bad model, YAML or data set fails before anything is written
    run.prepare(resume=cfg.resume or ckpt_path is not None, overwrite=cfg.overwrite, main_process=main_process)

    trainer_cfg = dict(to_dict(cfg)["trainer"])
    progress = trainer_cfg.pop("enable_progress_bar", None) is not False
    loggers = [CSVLogger(run.path, name="csv", version=""),
               TensorBoardLogger(run.path, name="tensorboard", version="", default_hp_metric=False)]
    trainer = pl.Trainer(**trainer_cfg, callbacks=_callbacks(run, progress, task), logger=loggers,
                         default_root_dir=run.path, enable_progress_bar=progress, plugins=[AtomicCheckpointIO()])
    if trainer.is_global_zero:
        write_text(run.config, dump_config(cfg, run_flags=False, task=task.name))
    if ckpt_path is not None:
        say(f"resuming from {ckpt_path}")
    fit_start = time.perf_counter()
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    except VisionAttnError as e:
        raise unwrap_worker_error(e) from None
    if trainer.interrupted:
        raise KeyboardInterrupt
    if trainer.limit_val_batches != 0 and module.last_val_step != trainer.global_step:
        # training stopped between validations (max_steps, max_time): measure the final weights too
        trainer.validate(module, datamodule=datamodule, verbose=False)
        if not run.best.is_file():
            trainer.save_checkpoint(run.best)
    fit_seconds = time.perf_counter() - fit_start
    if not trainer.is_global_zero:
        return TrainResult(run.path, {})
    metrics = task.finish(run, trainer, module, datamodule, cfg, start, fit_seconds, ckpt_path)
    say(f"{task.summary(metrics)} after {metrics['epochs']} epoch(s), {metrics['wall_time_s']:.0f} s; "
        f"run folder: {run.path}")
    return TrainResult(run.path, metrics)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def _value(metrics: Mapping[str, Any], key: str) -> float | None:
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
                ema: bool) -> dict[str, Any]:
    """The entries of ``metrics.json`` every task writes (epochs, steps, times, devices, files)."""
    return {
        "epochs": int(trainer.current_epoch),
        "max_epochs": trainer.max_epochs,
        "global_step": int(trainer.global_step),
        "wall_time_s": round(time.perf_counter() - start, 2),
        "fit_time_s": round(fit_seconds, 2),
        "resumed_from": ckpt_path,
        "ema": ema,
        "precision": str(trainer.precision),
        "devices": trainer.num_devices,
        "world_size": trainer.world_size,
        "files": {"best": run.best.name, "last": run.last.name, "weights": run.weights.name,
                  "config": run.config.name, "csv": "csv/metrics.csv", "tensorboard": "tensorboard/"},
        "torch": torch.__version__,
    }


def _finish(run: RunFolder, trainer, module, datamodule, cfg, start: float, fit_seconds: float,
            ckpt_path: str | None) -> dict[str, Any]:
    """Write model.safetensors, the figures and metrics.json; return the metrics."""
    from vision_attn.analysis import count_flops
    from vision_attn.tasks.classification import build_network
    from vision_attn.tasks.inference import accuracy_report
    from vision_attn.tasks.plots import epoch_history, plot_confusion, plot_curves

    save_final_weights(run, trainer, module)
    img_size = cfg.data.img_size
    with torch.device("meta"):  # a copy without memory or arithmetic: the trained one may be compiled
        shadow = build_network(cfg.model.name, cfg.model.model_kwargs, attention=cfg.model.attention,
                               num_classes=module.hparams.num_classes, img_size=img_size)
    flops = count_flops(shadow, img_size, name=cfg.model.name)
    callback = trainer.checkpoint_callback
    best = callback.best_model_score if callback is not None else None
    history = epoch_history(run.csv)
    plot_curves(history, run.path)
    report: dict[str, Any] = {}
    if module.last_confusion is not None:
        plot_confusion(module.last_confusion, module.class_names, run.path / "confusion.png")
        report = accuracy_report(module.last_confusion, module.class_names)
    cm = trainer.callback_metrics
    metrics = {
        "name": cfg.name,
        "model": cfg.model.name,
        "model_kwargs": cfg.model.model_kwargs or {},
        "data": str(datamodule.splits.root),
        "classes": module.class_names,
        "train_images": len(datamodule.splits.train),
        "val_images": len(datamodule.splits.val),
        "ignored_files": datamodule.splits.ignored,
        "skipped_bad_images": len(datamodule.splits.bad),
        "img_size": img_size,
        "val_top1": _value(cm, "val/top1"),
        "val_top5": _value(cm, "val/top5"),
        "val_loss": _value(cm, "val/loss"),
        "train_loss": _value(cm, "train/loss_epoch"),
        "best_val_top1": None if best is None else float(best),
        **run_metrics(run, trainer, cfg, start, fit_seconds, ckpt_path, ema=cfg.model.ema_decay is not None),
        "params": flops.params,
        "gmacs": round(flops.gmacs, 6),
        "per_class_accuracy": report.get("per_class_accuracy", {}),
    }
    write_json(run.metrics, metrics)
    return metrics


CLASSIFICATION = TrainTask(
    name="cls", monitor="val/top1", build=_build_classification, finish=_finish,
    summary=lambda m: f"val top-1 {_pct(m['val_top1'])}, top-5 {_pct(m['val_top5'])}")
