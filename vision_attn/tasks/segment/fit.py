"""Training an instance-segmentation model end to end: ``vision-attn train seg`` runs :func:`train_segmenter`.

The shared machinery is :func:`vision_attn.tasks.runner.run_training`; this file adds what
segmentation needs over detection: the data module with masks, the module with the mask loss,
``best.ckpt`` on the mask mAP@[.5:.95], and ``metrics.json`` with the box and mask mAP figures and
the per-class AP tables of both.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from vision_attn.tasks.detect.fit import build_detection, detection_report, detection_shadow
from vision_attn.tasks.run_folder import RunFolder
from vision_attn.tasks.runner import TrainResult, metric_value, run_training
from vision_attn.tasks.segment.data import SegmentationDataModule
from vision_attn.tasks.segment.module import SegmentationModule
from vision_attn.tasks.segment.plots import SEGMENTATION_PANELS
from vision_attn.tasks.detect.run import detection_calls, detections_cell
from vision_attn.tasks.segment import run as run_api
from vision_attn.tasks.segment.run import load_segmenter_run
from vision_attn.tasks.detect.explain import DETECT_EXPLAIN
from vision_attn.tasks.task import Echo, Metric, Task

__all__ = ["train_segmenter", "SEGMENT"]


def train_segmenter(config: Sequence[str] | Mapping[str, Any] | Any = (), *, echo: Echo | None = None) -> TrainResult:
    """Train a segmentation model as ``config`` says and write the run folder; return its path and final
    metrics (``config``: command-line arguments, a nested dict over the defaults, or a parsed configuration)."""
    return run_training(config, SEGMENT, echo=echo)


def _build(cfg, say: Echo) -> tuple[Any, Any]:
    return build_detection(cfg, say, SegmentationModule, SegmentationDataModule)


def _report(run: RunFolder, cm, module, datamodule, cfg, *, flops, best: float | None,
            common: dict[str, Any]) -> dict[str, Any]:
    """metrics.json: the detection figures (box mAP) and the mask mAP, its per-class table and the mask ratio."""
    metrics = detection_report(run, cm, module, datamodule, cfg, flops=flops, best=None, common=common)
    del metrics["best_val_map"]  # best.ckpt follows the mask mAP here
    mask = module.last_mask_report
    metrics.update(mask_ratio=cfg.data.mask_ratio, val_mask_map=metric_value(cm, "val/mask_mAP50-95"),
                   val_mask_map50=metric_value(cm, "val/mask_mAP50"), best_val_mask_map=best,
                   per_class_mask_ap=mask.as_dict()["per_class"] if mask is not None else {})
    return metrics


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


SEGMENT = Task(
    name="seg", title="Train a YOLO-style instance-segmentation model from a -seg YAML on COCO json (segmentation) "
                      "or YOLO polygon data (or demo:digit-masks).",
    module=SegmentationModule, datamodule=SegmentationDataModule, filled=frozenset({"num_classes", "class_names"}),
    primary=Metric("val_mask_map", "val/mask_mAP50-95", "mask mAP@.5:.95"),
    build=_build, shadow=detection_shadow, panels=SEGMENTATION_PANELS, report=_report,
    load=load_segmenter_run, lr_monitor=False,
    summary=lambda m: (f"val box mAP@.5: {_pct(m['val_map50'])}, mAP@[.5:.95]: {_pct(m['val_map'])}; mask mAP@.5: "
                       f"{_pct(m['val_mask_map50'])}, mAP@[.5:.95]: {_pct(m['val_mask_map'])}"),
    paths={"model.yaml": ("model",), "model.pretrained": (), "data.data": ()},
    **detection_calls(run_api.evaluate_segmenter, run_api.predict_segments, run_api.predict_segment_video),
    eval_listing=run_api.eval_listing, prediction=("instances (class score)", detections_cell),
    written="masks and segments.json", export_kind="segmenter", insertion="yaml",
    headline=(("val_mask_map50", "mask mAP@.5"), ("val_mask_map", "mask mAP@.5:.95"), ("val_map50", "box mAP@.5"),
              ("val_map", "box mAP@.5:.95")), explain=DETECT_EXPLAIN)
