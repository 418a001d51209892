"""Training an instance-segmentation model end to end: ``vision-attn train seg`` runs :func:`train_segmenter`.

The shared machinery is :func:`vision_attn.tasks.runner.run_training`; this file adds what
segmentation needs over detection: the data module with masks, the module with the mask loss,
``best.ckpt`` on the mask mAP@[.5:.95], and ``metrics.json`` with the box and mask mAP figures and
the per-class AP tables of both.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from vision_attn.tasks.detect.fit import detection_like_task, detection_report_and, map_summary
from vision_attn.tasks.runner import TrainResult, run_training
from vision_attn.tasks.segment.data import SegmentationDataModule
from vision_attn.tasks.segment.module import SegmentationModule
from vision_attn.tasks.segment.plots import SEGMENTATION_PANELS
from vision_attn.tasks.detect.run import detections_cell
from vision_attn.tasks.segment import run as run_api
from vision_attn.tasks.segment.run import load_segmenter_run
from vision_attn.tasks.detect.explain import DETECT_EXPLAIN
from vision_attn.tasks.task import Echo, Metric

__all__ = ["train_segmenter", "SEGMENT"]


def train_segmenter(config: Sequence[str] | Mapping[str, Any] | Any = (), *, echo: Echo | None = None) -> TrainResult:
    """Train a segmentation model as ``config`` says and write the run folder; return its path and final
    metrics (``config``: command-line arguments, a nested dict over the defaults, or a parsed configuration)."""
    return run_training(config, SEGMENT, echo=echo)


SEGMENT = detection_like_task(
    name="seg", title="Train a YOLO-style instance-segmentation model from a -seg YAML on COCO json (segmentation) "
                      "or YOLO polygon data (or demo:digit-masks).",
    module=SegmentationModule, datamodule=SegmentationDataModule,
    primary=Metric("val_mask_map", "val/mask_mAP50-95", "mask mAP@.5:.95"),
    calls=(run_api.evaluate_segmenter, run_api.predict_segments, run_api.predict_segment_video),
    panels=SEGMENTATION_PANELS, load=load_segmenter_run,
    report=detection_report_and("mask", lambda module: module.last_mask_report,
                                lambda datamodule, cfg: {"mask_ratio": cfg.data.mask_ratio}),
    summary=map_summary(("box", "val_map"), ("mask", "val_mask_map")),
    eval_listing=run_api.eval_listing, prediction=("instances (class score)", detections_cell),
    written="masks and segments.json", export_kind="segmenter",
    headline=(("val_mask_map50", "mask mAP@.5"), ("val_mask_map", "mask mAP@.5:.95"), ("val_map50", "box mAP@.5"),
              ("val_map", "box mAP@.5:.95")), explain=DETECT_EXPLAIN)
