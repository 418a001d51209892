"""Training a detector end to end: ``vision-attn train det`` runs :func:`train_detector`.

The shared machinery is :func:`vision_attn.tasks.runner.run_training`; this file adds what detection
needs: the data module and module from the configuration (classes from the data), ``best.ckpt`` on
``val/mAP50-95``, and at the end ``model.safetensors`` (EMA weights), ``loss.png`` and ``map.png``,
``predictions.png`` (written by each validation) and ``metrics.json`` with the mAP figures and the
per-class AP table.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, Mapping, Sequence

from vision_attn.models.yolo import build_detector, load_yaml
from vision_attn.models.yolo.backbone import without_backbone_weights
from vision_attn.tasks.config import to_dict
from vision_attn.tasks.detect.data import DetectionDataModule
from vision_attn.tasks.detect.module import DetectionModule, load_detector_yaml
from vision_attn.tasks.detect.plots import DETECTION_PANELS
from vision_attn.tasks.detect import run as run_api
from vision_attn.tasks.detect.run import load_detector_run
from vision_attn.tasks.run_folder import RunFolder
from vision_attn.tasks.runner import TrainResult, metric_value, run_training
from vision_attn.tasks.detect.explain import DETECT_EXPLAIN
from vision_attn.tasks.task import Echo, Metric, Task

__all__ = ["train_detector", "build_detection", "detection_shadow", "detection_report", "detection_report_and",
           "map_summary", "detection_like_task", "DETECT"]


def train_detector(config: Sequence[str] | Mapping[str, Any] | Any = (), *, echo: Echo | None = None) -> TrainResult:
    """Train a detector as ``config`` says and write the run folder; return its path and final metrics.

    ``config``: command-line arguments (``["--config", "configs/train/detect/demo_digit_boxes.yaml"]``), a
    nested dict over the defaults, or a parsed configuration (``parse_train_config(args, "det")``).
    """
    return run_training(config, DETECT, echo=echo)


def build_detection(cfg, say: Echo, module_class: type = DetectionModule,
                    datamodule_class: type = DetectionDataModule) -> tuple[Any, Any]:
    """The data module (scanned, its problems said) and the module of a detection-like task's config."""
    if to_dict(cfg)["model"]["yaml"] is not None:  # None: the YAML inside model.pretrained (or the default)
        load_detector_yaml(to_dict(cfg)["model"]["yaml"])  # a bad model YAML fails before the data is scanned
    data_cfg = to_dict(cfg)["data"]
    datamodule = datamodule_class(**data_cfg)
    datamodule.scan()
    say(f"data: {datamodule.summary()}")
    for line in datamodule.faults.log_lines():
        say(f"data: {line}")
    model_cfg = to_dict(cfg)["model"]
    module = module_class(**model_cfg, **datamodule.model_fill())
    params = sum(p.numel() for p in module.model.parameters())
    say(f"model: {module.yaml_source} (scale {module.model.scale or '-'}), {params / 1e6:.2f} M parameters, "
        f"{datamodule.num_classes} classes, {data_cfg['img_size']} px")
    return module, datamodule


def detection_shadow(module, cfg) -> tuple[Any, str]:
    """The trained network's architecture, rebuilt from the module's YAML text (the runner counts its FLOPs;
    a Backbone row's pretrained file is not read for it)."""
    net = build_detector(without_backbone_weights(load_yaml(module.yaml_text)[0]), scale=module.model.scale, num_classes=module.hparams.num_classes,
                         **module.network_options())
    return net, module.yaml_source


def detection_report(run: RunFolder, cm, module, datamodule, cfg, *, flops, best: float | None,
            common: dict[str, Any]) -> dict[str, Any]:
    """metrics.json with the mAP figures."""
    report = module.last_report
    metrics = {
        "name": cfg.name,
        "model": module.yaml_source,
        "scale": module.model.scale,
        "data": {"source": str(cfg.data.data), **datamodule.faults.report()},
        "classes": module.class_names,
        "train_images": len(datamodule.train_set),
        "val_images": len(datamodule.val_set),
        "train_data": datamodule.train_set.stats.summary(),
        "val_data": datamodule.val_set.stats.summary(),
        "img_size": cfg.data.img_size,
        "val_map": metric_value(cm, "val/mAP50-95"),
        "val_map50": metric_value(cm, "val/mAP50"),
        "train_loss": metric_value(cm, "train/loss_epoch"),
        "best_val_map": best,
        **common,
        "params": flops.params,
        "gflops": round(2 * flops.gmacs, 6),
        "per_class_ap": report.as_dict()["per_class"] if report is not None else {},
    }
    metrics["files"].update(predictions="predictions.png", curves=["loss.png", "map.png"])
    return metrics


def detection_report_and(metric: str, report_of: Callable[[Any], Any],
                         extra: Callable[[Any, Any], dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """The ``report`` of a detection-like task ranked by a mAP of its own, ``metric`` (``mask``, ``pose``):
    :func:`detection_report` (the box mAP; its ``best_val_map`` left out, ``best.ckpt`` follows the task's
    mAP), then ``extra(datamodule, cfg)`` and ``val_METRIC_map``, ``val_METRIC_map50`` (logged as
    ``val/METRIC_mAP50-95``, ``val/METRIC_mAP50``), ``best_val_METRIC_map`` and ``per_class_METRIC_ap`` (the
    per-class table of ``report_of(module)``, its last validation's report)."""

    def report(run: RunFolder, cm, module, datamodule, cfg, *, flops, best: float | None,
               common: dict[str, Any]) -> dict[str, Any]:
        metrics = detection_report(run, cm, module, datamodule, cfg, flops=flops, best=None, common=common)
        del metrics["best_val_map"]
        last = report_of(module)
        metrics.update(extra(datamodule, cfg))
        metrics.update({f"val_{metric}_map": metric_value(cm, f"val/{metric}_mAP50-95"),
                        f"val_{metric}_map50": metric_value(cm, f"val/{metric}_mAP50"), f"best_val_{metric}_map": best,
                        f"per_class_{metric}_ap": last.as_dict()["per_class"] if last is not None else {}})
        return metrics

    return report


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def map_summary(*parts: tuple[str, str]) -> Callable[[dict[str, Any]], str]:
    """The last progress line of a detection-like run: ``val LABEL mAP@.5: X, mAP@[.5:.95]: Y`` for each
    (label, ``metrics.json`` key of the mAP@[.5:.95]; its mAP@.5 the key + ``50``) part, joined by ``; ``."""
    return lambda m: "val " + "; ".join(f"{label + ' ' if label else ''}mAP@.5: {_pct(m[key + '50'])}, "
                                        f"mAP@[.5:.95]: {_pct(m[key])}" for label, key in parts)


def detection_like_task(*, name: str, title: str, module: type, datamodule: type, primary: Metric,
                        calls: tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]],
                        filled: frozenset[str] = frozenset({"num_classes", "class_names"}), **fields: Any) -> Task:
    """The record of a task that trains a detector YAML's head (detection, segmentation, keypoints, oriented
    boxes): what they share (the build by :func:`build_detection` of ``module`` and ``datamodule``, the
    network rebuilt from its YAML, the config keys that name files, no rate monitor, ablation by YAML
    rows, and ``evaluate`` / ``predict`` / ``predict_video`` over ``calls``, the task's evaluate, predict
    and video functions (:func:`~vision_attn.tasks.detect.run.detection_calls`)); ``fields``: the rest."""
    return Task(name=name, title=title, module=module, datamodule=datamodule, filled=filled, primary=primary,
                build=partial(build_detection, module_class=module, datamodule_class=datamodule),
                shadow=detection_shadow, lr_monitor=False, insertion="yaml",
                paths={"model.yaml": ("model",), "model.pretrained": (), "data.data": ()},
                **run_api.detection_calls(*calls), **fields)


DETECT = detection_like_task(
    name="det", title="Train a YOLO-style detector from a YAML on COCO json or YOLO txt data (or demo:digit-boxes).",
    module=DetectionModule, datamodule=DetectionDataModule, primary=Metric("val_map", "val/mAP50-95", "mAP@.5:.95"),
    calls=(run_api.evaluate_detector, run_api.predict_detections, run_api.predict_detection_video),
    panels=DETECTION_PANELS, report=detection_report, load=load_detector_run, summary=map_summary(("", "val_map")),
    eval_listing=run_api.eval_listing, prediction=("detections (class score)", run_api.detections_cell),
    written="boxes and detections.json", export_kind="detector",
    headline=(("val_map50", "mAP@.5"), ("val_map", "mAP@.5:.95")), explain=DETECT_EXPLAIN)
