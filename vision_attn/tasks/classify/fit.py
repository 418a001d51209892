"""Training a classifier end to end: ``vision-attn train cls`` runs :func:`train_classifier`.

The shared machinery is :func:`vision_attn.tasks.runner.run_training`; this file adds what
classification needs: the data module and module from the configuration (classes from the folders),
``best.ckpt`` on ``val/top1``, and at the end ``model.safetensors`` (EMA weights), ``loss.png``,
``accuracy.png``, ``confusion.png`` and ``metrics.json`` with the accuracy figures.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from vision_attn.errors import DataError
from vision_attn.tasks.classify.data import ClassificationDataModule
from vision_attn.tasks.classify.module import ClassificationModule
from vision_attn.tasks.classify.network import build_network, network_spec, pretrained_normalisation
from vision_attn.tasks.classify.plots import CLASSIFICATION_PANELS, plot_confusion
from vision_attn.tasks.classify import run as run_api
from vision_attn.tasks.classify.run import accuracy_report, load_classifier_run
from vision_attn.tasks.classify.yolo import YOLO_MEAN, YOLO_STD
from vision_attn.tasks.config import to_dict
from vision_attn.tasks.run_folder import RunFolder
from vision_attn.tasks.runner import TrainResult, metric_value, run_training
from vision_attn.tasks.classify.explain import CLASSIFY_EXPLAIN
from vision_attn.tasks.task import Echo, Metric, Task

__all__ = ["train_classifier", "CLASSIFY"]


def train_classifier(config: Sequence[str] | Mapping[str, Any] | Any = (), *, echo: Echo | None = None) -> TrainResult:
    """Train as ``config`` says and write the run folder; return its path and final metrics.

    ``config``: command-line arguments (``["--config", "configs/train/classify/demo_digits.yaml",
    "--trainer.max_epochs", "3"]``), a nested dict (``{"name": ..., "model": {...}, "data": {...},
    "trainer": {...}}``) over the defaults, or a parsed configuration. ``echo`` receives progress lines
    (the command line prints them). Errors are :class:`~vision_attn.errors.VisionAttnError`\\ s.
    """
    return run_training(config, CLASSIFY, echo=echo)


def _build_classification(cfg, say: Echo) -> tuple[Any, Any]:
    data_cfg = to_dict(cfg)["data"]
    model_cfg = to_dict(cfg)["model"]
    if data_cfg.get("mean") is None and data_cfg.get("std") is None and model_cfg.get("pretrained"):
        name, _ = network_spec(model_cfg["name"], model_cfg["model_kwargs"], model_cfg["pretrained"])
        found = pretrained_normalisation(name, model_cfg["pretrained"])
        if found:
            data_cfg.update(found)
            say(f"data: normalised as the checkpoint was, mean {_triple(found['mean'])}, std {_triple(found['std'])}")
    if data_cfg.get("mean") is None and data_cfg.get("std") is None and model_cfg.get("yaml"):
        data_cfg.update(mean=YOLO_MEAN, std=YOLO_STD)  # a YOLO classifier sees images in [0, 1]
        say("data: not normalised (a YOLO classifier's input: images in [0, 1], mean 0, std 1)")
    datamodule = ClassificationDataModule(**data_cfg)
    splits = datamodule.scan()
    say(f"data: {splits.summary()}")
    for line in splits.faults.log_lines():
        say(f"data: {line}")
    if len(splits.classes) < 2:
        raise DataError(f"{splits.root}: one class folder ({', '.join(splits.classes)}); a classifier needs two or "
                        "more class folders (train/CLASS/...)")
    module = ClassificationModule(**model_cfg, num_classes=len(splits.classes), img_size=data_cfg["img_size"],
                                  class_names=splits.classes)
    patch = getattr(getattr(module.model, "patch_embed", None), "patch_size", None)
    if patch is not None and len(set(patch)) == 1:  # NaFlex patchifies with the model's square patches
        datamodule.use_patch(int(patch[0]))
    if datamodule.budget is not None:
        say(f"data: {datamodule.budget.describe(datamodule.collate.patch)}")
    params = sum(p.numel() for p in module.model.parameters())
    say(f"model: {module.hparams.name}, {params / 1e6:.2f} M parameters, {len(splits.classes)} classes, "
        f"{data_cfg['img_size']} px")
    return module, datamodule


def _shadow(module, cfg) -> tuple[Any, str]:
    hp = module.hparams  # the name and sizes a transformers folder stated are resolved there
    net = build_network(hp.name, hp.model_kwargs, attention=cfg.model.attention,
                        num_classes=hp.num_classes, img_size=cfg.data.img_size, yaml=hp.get("yaml"),
                        scale=hp.get("yaml_scale"))
    return net, hp.name


def _report(run: RunFolder, cm, module, datamodule, cfg, *, flops, best: float | None,
            common: dict[str, Any]) -> dict[str, Any]:
    """The confusion figure, and metrics.json with the accuracy figures."""
    report: dict[str, Any] = {}
    if module.last_confusion is not None:
        plot_confusion(module.last_confusion, module.class_names, run.path / "confusion.png")
        report = accuracy_report(module.last_confusion, module.class_names)
    return {
        "name": cfg.name,
        "model": module.hparams.name,
        "model_kwargs": module.hparams.model_kwargs or {},
        "data": {"source": str(datamodule.splits.root), **datamodule.splits.faults.report()},
        "classes": module.class_names,
        "train_images": len(datamodule.splits.train),
        "val_images": len(datamodule.splits.val),
        "ignored_files": datamodule.splits.ignored,
        "skipped_bad_images": len(datamodule.splits.bad),
        "img_size": cfg.data.img_size,
        **({"naflex": naflex} if (naflex := datamodule.naflex_record(_replicas(datamodule))) else {}),
        "val_top1": metric_value(cm, "val/top1"),
        "val_top5": metric_value(cm, "val/top5"),
        "val_loss": metric_value(cm, "val/loss"),
        "train_loss": metric_value(cm, "train/loss_epoch"),
        "best_val_top1": best,
        **common,
        "params": flops.params,
        "gmacs": round(flops.gmacs, 6),
        "per_class_accuracy": report.get("per_class_accuracy", {}),
    }


def _replicas(datamodule) -> int:
    trainer = datamodule.trainer
    return int(trainer.world_size) if trainer is not None else 1


def _triple(values) -> str:
    return "(" + ", ".join(f"{v:.4g}" for v in values) + ")"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


CLASSIFY = Task(
    name="cls", title="Train an image classifier on ImageNet-style folders (train/CLASS/*.jpg, val/CLASS/*.jpg).",
    module=ClassificationModule, datamodule=ClassificationDataModule,
    filled=frozenset({"num_classes", "img_size", "class_names"}),
    primary=Metric("val_top1", "val/top1", "top-1"),
    build=_build_classification, shadow=_shadow, panels=CLASSIFICATION_PANELS, report=_report,
    load=load_classifier_run,
    summary=lambda m: f"val top-1: {_pct(m['val_top1'])}, top-5: {_pct(m['val_top5'])}",
    paths={"model.pretrained": (), "model.teacher": (), "data.root": ()},
    evaluate=run_api.evaluate, eval_listing=run_api.eval_listing, predict=run_api.predict,
    predict_video=run_api.predict_video, prediction=run_api.PREDICTION, export_kind="classifier", insertion="model",
    headline=(("val_top1", "top-1"), ("val_top5", "top-5")), explain=CLASSIFY_EXPLAIN)
