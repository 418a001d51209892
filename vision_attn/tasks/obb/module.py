"""The oriented-box (OBB) LightningModule: a YOLO-style model whose last row is an ``OBB`` head (``OBB26`` for
YOLO26), trained with ultralytics' oriented-box loss (ProbIoU on the rotated boxes, DFL on their sides'
distances, the class BCE; YOLO26's angle term for ``OBB26``), or its end-to-end form for an end-to-end head
(:func:`~vision_attn.losses.detector_loss` picks it).

Everything else is :class:`~vision_attn.tasks.detect.module.DetectionModule`'s: optimiser groups, the warmup
and decay, the EMA, the closing of the mosaic, exact resume. Validation keeps each detection's rotated box
(after rotated NMS) in original image pixels and computes COCO-style mAP with the rotated IoU
(:func:`~vision_attn.evaluation.obb_map`) as ``val/mAP50-95`` and ``val/mAP50`` (ultralytics' OBB
``metrics/mAP50-95(B)``); ``predictions.png`` shows the rotated boxes.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from vision_attn.evaluation import obb_map
from vision_attn.tasks.detect.module import DetectionModule
from vision_attn.tasks.obb.plots import obb_grid
from vision_attn.tasks.obb.run import rotated_of_batch

__all__ = ["OBBModule"]


class OBBModule(DetectionModule):
    """Images (B, 3, H, W) in [0, 1] -> oriented boxes.

    Args: those of :class:`~vision_attn.tasks.detect.module.DetectionModule`, by keyword (``yaml`` an -obb YAML
    such as ``yolov8n-obb.yaml``; default ``yolov8-obb.yaml``), and
        angle_gain: weight of YOLO26's angle term (``OBB26`` heads; ultralytics' 1).
    """

    task_name = "obb"
    default_yaml = "yolov8-obb.yaml"
    heads = ("obb",)
    prediction_grid = staticmethod(obb_grid)
    of_batch = staticmethod(rotated_of_batch)
    truth_keys = ("rboxes",)  # predictions.png outlines the true rotated boxes

    def __init__(self, *, angle_gain: float = 1.0, **kwargs: Any) -> None:
        self._angle_gain = angle_gain  # read by build_criterion, which the detection module's __init__ calls
        super().__init__(**kwargs)

    def wrong_head(self) -> str:
        return (f"model.yaml={self.yaml_source}: its last row is {type(self.model.model[-1]).__name__}, not an OBB "
                f"head; train obb takes an -obb YAML (yolov8n-obb.yaml, yolo11n-obb.yaml, ...)")

    def build_criterion(self, e2e_weights: str, **gains: float) -> nn.Module:
        return super().build_criterion(e2e_weights, angle_gain=self._angle_gain, **gains)

    # ---------------------------------------------------------------- validation
    def sample_prediction(self, det: dict[str, Any]) -> dict[str, Any]:
        return {"rboxes": det["input_rboxes"], "scores": det["scores"], "labels": det["labels"],
                "size": det["input_size"]}

    def evaluate(self, truth: list[dict[str, Any]], dets: list[dict[str, Any]], category_ids: list[int]
                 ) -> dict[str, float]:
        """Rotated-box mAP of one validation (kept in :attr:`last_report`) -> the metrics to log."""
        report = obb_map(truth, dets, names=self.class_names, category_ids=category_ids)
        self.last_report = report
        return {"val/mAP50-95": float(report.map), "val/mAP50": float(report.map50)}
