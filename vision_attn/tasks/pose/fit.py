"""Training a keypoint (pose) model end to end: ``vision-attn train pose`` runs :func:`train_pose`.

The shared machinery is :func:`vision_attn.tasks.runner.run_training`; this file adds what keypoints need
over detection: the data module with keypoints (which fills the module's ``keypoints``), the module with
the keypoint loss, ``best.ckpt`` on the keypoint mAP@[.5:.95] (ultralytics' ``metrics/mAP50-95(P)``),
and ``metrics.json`` with the box and keypoint mAP figures and the per-class AP tables of both.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from vision_attn.tasks.detect.explain import DETECT_EXPLAIN
from vision_attn.tasks.detect.fit import detection_like_task, detection_report_and, map_summary
from vision_attn.tasks.pose import run as run_api
from vision_attn.tasks.pose.data import PoseDataModule
from vision_attn.tasks.pose.module import PoseModule
from vision_attn.tasks.pose.plots import POSE_PANELS
from vision_attn.tasks.pose.run import load_pose_run
from vision_attn.tasks.runner import TrainResult, run_training
from vision_attn.tasks.task import Echo, Metric

__all__ = ["train_pose", "POSE"]


def train_pose(config: Sequence[str] | Mapping[str, Any] | Any = (), *, echo: Echo | None = None) -> TrainResult:
    """Train a keypoint model as ``config`` says and write the run folder; return its path and final metrics
    (``config``: command-line arguments, a nested dict over the defaults, or a parsed configuration)."""
    return run_training(config, POSE, echo=echo)


POSE = detection_like_task(
    name="pose", title="Train a YOLO-style keypoint (pose) model from a -pose YAML on YOLO keypoint labels or COCO "
                       "keypoints (or demo:digit-keypoints).",
    module=PoseModule, datamodule=PoseDataModule, filled=frozenset({"num_classes", "class_names", "keypoints"}),
    primary=Metric("val_pose_map", "val/pose_mAP50-95", "keypoint mAP@.5:.95"),
    calls=(run_api.evaluate_pose, run_api.predict_keypoints, run_api.predict_keypoint_video),
    panels=POSE_PANELS, load=load_pose_run,
    report=detection_report_and("pose", lambda module: module.last_pose_report,
                                lambda datamodule, cfg: {"keypoints": datamodule.keypoint_spec.as_dict()}),
    summary=map_summary(("box", "val_map"), ("keypoint", "val_pose_map")),
    eval_listing=run_api.eval_listing, prediction=("detections (class score, keypoints)", run_api.keypoints_cell),
    written="boxes with keypoints and keypoints.json", export_kind="keypoints",
    headline=(("val_pose_map", "keypoint mAP@.5:.95"), ("val_pose_map50", "keypoint mAP@.5"),
              ("val_map50", "box mAP@.5"), ("val_map", "box mAP@.5:.95")), explain=DETECT_EXPLAIN)
