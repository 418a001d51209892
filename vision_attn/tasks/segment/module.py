"""The instance-segmentation LightningModule: a YOLO-style model whose last row is a ``Segment`` head
(``Segment26`` for YOLO26), trained with the YOLOv8 segmentation loss (the detection loss plus a
per-instance mask term over prototypes x coefficients), or its end-to-end form for an end-to-end head.

Everything else is :class:`~vision_attn.tasks.detect.module.DetectionModule`'s: optimiser groups, the
warmup and decay, the EMA, the closing of the mosaic, exact resume. Validation keeps each detection's
mask (coefficients x prototypes, cropped to its box, at the input's resolution, thresholded at 0.5)
in original image pixels as a COCO RLE, and computes box and mask COCO mAP (``val/mAP50-95``,
``val/mAP50``, ``val/mask_mAP50-95``, ``val/mask_mAP50``); ``predictions.png`` shows the masks.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from vision_attn.evaluation import coco_map
from vision_attn.tasks.detect.module import DetectionModule
from vision_attn.tasks.segment.plots import segment_grid
from vision_attn.tasks.segment.run import segments_of_batch, with_rle

__all__ = ["SegmentationModule"]


class SegmentationModule(DetectionModule):
    """Images (B, 3, H, W) in [0, 1] -> detections with instance masks.

    Args: those of :class:`~vision_attn.tasks.detect.module.DetectionModule`, by keyword (``yaml`` a -seg YAML
    such as ``yolov8n-seg.yaml``; default ``yolov8-seg.yaml``), and
        mask_gain: weight of the mask term (None: ``box_gain``, as ultralytics).
    """

    task_name = "seg"
    prediction_grid = staticmethod(segment_grid)
    default_yaml = "yolov8-seg.yaml"
    heads = ("segment",)
    of_batch = staticmethod(segments_of_batch)
    scored = staticmethod(with_rle)  # the evaluation takes the masks as COCO RLEs
    truth_keys = ("masks",)  # predictions.png outlines the true masks too

    def __init__(self, *, mask_gain: float | None = None, **kwargs: Any) -> None:
        self._mask_gain = mask_gain  # read by build_criterion, which the detection module's __init__ calls
        super().__init__(**kwargs)
        self.last_mask_report: Any = None  # the last validation's mask coco_map result

    def wrong_head(self) -> str:
        return (f"model.yaml={self.yaml_source}: its last row is {type(self.model.model[-1]).__name__}, not a "
                f"Segment head; train seg takes a -seg YAML (yolov8n-seg.yaml, yolo11n-seg.yaml, ...), train det a "
                f"detector YAML")

    def build_criterion(self, e2e_weights: str, **gains: float) -> nn.Module:
        return super().build_criterion(e2e_weights, mask_gain=self._mask_gain, **gains)

    # ---------------------------------------------------------------- validation
    def sample_prediction(self, det: dict[str, Any]) -> dict[str, Any]:
        return {**super().sample_prediction(det), "masks": det["input_masks"]}

    def evaluate(self, truth: list[dict[str, Any]], dets: list[dict[str, Any]], category_ids: list[int]
                 ) -> dict[str, float]:
        """Box mAP (:attr:`last_report`) and mask mAP (:attr:`last_mask_report`) of one validation."""
        metrics = super().evaluate(truth, dets, category_ids)
        report = coco_map(truth, dets, names=self.class_names, category_ids=category_ids,
                          backend=self.hparams.coco_backend, iou_type="segm")
        self.last_mask_report = report
        return {**metrics, "val/mask_mAP50-95": float(report.map), "val/mask_mAP50": float(report.map50)}
