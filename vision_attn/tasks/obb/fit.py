"""Training an oriented-box (OBB) model end to end: ``vision-attn train obb`` runs :func:`train_obb`.

The shared machinery is :func:`vision_attn.tasks.runner.run_training`; this file adds what oriented boxes
need over detection: the data module with rotated boxes, the module with the oriented-box loss and the
rotated-box mAP (``best.ckpt`` on its mAP@[.5:.95]); ``metrics.json`` has detection's layout, its mAP
figures and per-class table those of the rotated boxes.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from vision_attn.tasks.detect.fit import build_detection, detection_report, detection_shadow
from vision_attn.tasks.detect.run import detection_calls
from vision_attn.tasks.obb import run as run_api
from vision_attn.tasks.obb.data import OBBDataModule
from vision_attn.tasks.obb.module import OBBModule
from vision_attn.tasks.obb.plots import OBB_PANELS
from vision_attn.tasks.obb.run import load_obb_run
from vision_attn.tasks.runner import TrainResult, run_training
from vision_attn.tasks.task import Echo, Metric, Task

__all__ = ["train_obb", "OBB_TASK"]


def train_obb(config: Sequence[str] | Mapping[str, Any] | Any = (), *, echo: Echo | None = None) -> TrainResult:
    """Train an oriented-box model as ``config`` says and write the run folder; return its path and final
    metrics (``config``: command-line arguments, a nested dict over the defaults, or a parsed configuration)."""
    return run_training(config, OBB_TASK, echo=echo)


def _build(cfg, say: Echo) -> tuple[Any, Any]:
    return build_detection(cfg, say, OBBModule, OBBDataModule)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


OBB_TASK = Task(
    name="obb", title="Train a YOLO-style oriented-box (OBB) model from an -obb YAML on YOLO oriented-box labels "
                      "(class x1 y1 ... x4 y4; or demo:digit-obb).",
    module=OBBModule, datamodule=OBBDataModule, filled=frozenset({"num_classes", "class_names"}),
    primary=Metric("val_map", "val/mAP50-95", "rotated-box mAP@.5:.95"),
    build=_build, shadow=detection_shadow, panels=OBB_PANELS, report=detection_report,
    load=load_obb_run, lr_monitor=False,
    summary=lambda m: f"val rotated-box mAP@.5: {_pct(m['val_map50'])}, mAP@[.5:.95]: {_pct(m['val_map'])}",
    paths={"model.yaml": ("model",), "model.pretrained": (), "data.data": ()},
    **detection_calls(run_api.evaluate_obb, run_api.predict_rotated, run_api.predict_rotated_video),
    eval_listing=run_api.eval_listing, prediction=("oriented boxes (class score angle)", run_api.rotated_cell),
    written="rotated boxes and rotated.json", export_kind="rotated", insertion="yaml",
    headline=(("val_map50", "mAP@.5"), ("val_map", "mAP@.5:.95")))
