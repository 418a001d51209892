"""Training an oriented-box (OBB) model end to end: ``vision-attn train obb`` runs :func:`train_obb`.

The shared machinery is :func:`vision_attn.tasks.runner.run_training`; this file adds what oriented boxes
need over detection: the data module with rotated boxes, the module with the oriented-box loss and the
rotated-box mAP (``best.ckpt`` on its mAP@[.5:.95]); ``metrics.json`` has detection's layout, its mAP
figures and per-class table those of the rotated boxes.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from vision_attn.tasks.detect.fit import detection_like_task, detection_report, map_summary
from vision_attn.tasks.obb import run as run_api
from vision_attn.tasks.obb.data import OBBDataModule
from vision_attn.tasks.obb.module import OBBModule
from vision_attn.tasks.obb.plots import OBB_PANELS
from vision_attn.tasks.obb.run import load_obb_run
from vision_attn.tasks.runner import TrainResult, run_training
from vision_attn.tasks.task import Echo, Metric

__all__ = ["train_obb", "OBB_TASK"]


def train_obb(config: Sequence[str] | Mapping[str, Any] | Any = (), *, echo: Echo | None = None) -> TrainResult:
    """Train an oriented-box model as ``config`` says and write the run folder; return its path and final
    metrics (``config``: command-line arguments, a nested dict over the defaults, or a parsed configuration)."""
    return run_training(config, OBB_TASK, echo=echo)


OBB_TASK = detection_like_task(
    name="obb", title="Train a YOLO-style oriented-box (OBB) model from an -obb YAML on YOLO oriented-box labels "
                      "(class x1 y1 ... x4 y4; or demo:digit-obb).",
    module=OBBModule, datamodule=OBBDataModule, primary=Metric("val_map", "val/mAP50-95", "rotated-box mAP@.5:.95"),
    calls=(run_api.evaluate_obb, run_api.predict_rotated, run_api.predict_rotated_video),
    panels=OBB_PANELS, report=detection_report, load=load_obb_run, summary=map_summary(("rotated-box", "val_map")),
    eval_listing=run_api.eval_listing, prediction=("oriented boxes (class score angle)", run_api.rotated_cell),
    written="rotated boxes and rotated.json", export_kind="rotated",
    headline=(("val_map50", "mAP@.5"), ("val_map", "mAP@.5:.95")))
