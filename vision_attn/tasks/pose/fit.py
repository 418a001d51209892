"""Training a keypoint (pose) model end to end: ``vision-attn train pose`` runs :func:`train_pose`.

The shared machinery is :func:`vision_attn.tasks.runner.run_training`; this file adds what keypoints need
over detection: the data module with keypoints (which fills the module's ``keypoints``), the module with
the keypoint loss, ``best.ckpt`` on the keypoint mAP@[.5:.95] (ultralytics' ``metrics/mAP50-95(P)``),
and ``metrics.json`` with the box and keypoint mAP figures and the per-class AP tables of both.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from vision_attn.tasks.detect.explain import DETECT_EXPLAIN
from vision_attn.tasks.detect.fit import build_detection, detection_report, detection_shadow
from vision_attn.tasks.detect.run import detection_calls
from vision_attn.tasks.pose import run as run_api
from vision_attn.tasks.pose.data import PoseDataModule
from vision_attn.tasks.pose.module import PoseModule
from vision_attn.tasks.pose.plots import POSE_PANELS
from vision_attn.tasks.pose.run import load_pose_run
from vision_attn.tasks.run_folder import RunFolder
from vision_attn.tasks.runner import TrainResult, metric_value, run_training
from vision_attn.tasks.task import Echo, Metric, Task

__all__ = ["train_pose", "POSE"]


def train_pose(config: Sequence[str] | Mapping[str, Any] | Any = (), *, echo: Echo | None = None) -> TrainResult:
    """Train a keypoint model as ``config`` says and write the run folder; return its path and final metrics
    (``config``: command-line arguments, a nested dict over the defaults, or a parsed configuration)."""
    return run_training(config, POSE, echo=echo)


def _build(cfg, say: Echo) -> tuple[Any, Any]:
    return build_detection(cfg, say, PoseModule, PoseDataModule)


def _report(run: RunFolder, cm, module, datamodule, cfg, *, flops, best: float | None,
            common: dict[str, Any]) -> dict[str, Any]:
    """metrics.json: the detection figures (box mAP), the keypoint mAP and its per-class table, the keypoints."""
    metrics = detection_report(run, cm, module, datamodule, cfg, flops=flops, best=None, common=common)
    del metrics["best_val_map"]  # best.ckpt follows the keypoint mAP here
    pose = module.last_pose_report
    metrics.update(keypoints=datamodule.keypoint_spec.as_dict(), val_pose_map=metric_value(cm, "val/pose_mAP50-95"),
                   val_pose_map50=metric_value(cm, "val/pose_mAP50"), best_val_pose_map=best,
                   per_class_pose_ap=pose.as_dict()["per_class"] if pose is not None else {})
    return metrics


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


POSE = Task(
    name="pose", title="Train a YOLO-style keypoint (pose) model from a -pose YAML on YOLO keypoint labels or COCO "
                       "keypoints (or demo:digit-keypoints).",
    module=PoseModule, datamodule=PoseDataModule, filled=frozenset({"num_classes", "class_names", "keypoints"}),
    primary=Metric("val_pose_map", "val/pose_mAP50-95", "keypoint mAP@.5:.95"),
    build=_build, shadow=detection_shadow, panels=POSE_PANELS, report=_report,
    load=load_pose_run, lr_monitor=False,
    summary=lambda m: (f"val box mAP@.5: {_pct(m['val_map50'])}, mAP@[.5:.95]: {_pct(m['val_map'])}; keypoint "
                       f"mAP@.5: {_pct(m['val_pose_map50'])}, mAP@[.5:.95]: {_pct(m['val_pose_map'])}"),
    paths={"model.yaml": ("model",), "model.pretrained": (), "data.data": ()},
    **detection_calls(run_api.evaluate_pose, run_api.predict_keypoints, run_api.predict_keypoint_video),
    eval_listing=run_api.eval_listing, prediction=("detections (class score, keypoints)", run_api.keypoints_cell),
    written="boxes with keypoints and keypoints.json", export_kind="keypoints", insertion="yaml",
    headline=(("val_pose_map", "keypoint mAP@.5:.95"), ("val_pose_map50", "keypoint mAP@.5"),
              ("val_map50", "box mAP@.5"), ("val_map", "box mAP@.5:.95")), explain=DETECT_EXPLAIN)
