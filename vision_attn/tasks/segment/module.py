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

from typing import Any, Literal

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.evaluation import coco_map
from vision_attn.losses import EndToEndLoss, SegmentationLoss
from vision_attn.tasks.detect.module import DetectionModule
from vision_attn.tasks.segment.plots import segment_grid
from vision_attn.tasks.segment.run import segments_of_batch, with_rle

__all__ = ["SegmentationModule"]


class SegmentationModule(DetectionModule):
    """Images (B, 3, H, W) in [0, 1] -> detections with instance masks.

    Args: those of :class:`~vision_attn.tasks.detect.module.DetectionModule` (``yaml`` a -seg YAML such as
    ``yolov8n-seg.yaml``; default ``yolov8-seg.yaml``), and
        mask_gain: weight of the mask term (None: ``box_gain``, as ultralytics).
    """

    task_name = "seg"
    prediction_grid = staticmethod(segment_grid)
    default_yaml = "yolov8-seg.yaml"

    def __init__(
        self,
        yaml: str | None = None,
        scale: str | None = None,
        num_classes: int = 80,
        class_names: list[str] | None = None,
        pretrained: str | None = None,
        optimizer: Literal["sgd", "adamw"] = "adamw",
        lr: float = 0.002,
        lrf: float = 0.01,
        schedule: Literal["linear", "cosine"] = "linear",
        momentum: float = 0.937,
        weight_decay: float = 5e-4,
        warmup_epochs: float = 3.0,
        min_warmup_steps: int = 100,
        warmup_momentum: float = 0.8,
        warmup_bias_lr: float | None = None,
        box_gain: float = 7.5,
        cls_gain: float = 0.5,
        dfl_gain: float = 1.5,
        e2e_weights: Literal["yolo26", "yolov10"] = "yolo26",
        ema_decay: float | None = 0.9999,
        ema_tau: float = 2000.0,
        close_mosaic: int = 10,
        conf: float = 0.001,
        iou: float = 0.7,
        max_det: int = 300,
        plot_images: int = 8,
        coco_backend: Literal["faster", "pycocotools"] = "faster",
        channels_last: bool = True,
        compile: bool = False,
        mask_gain: float | None = None,
    ) -> None:
        self._mask_gain = mask_gain  # read by build_criterion, which the detection module's __init__ calls
        super().__init__(yaml=yaml, scale=scale, num_classes=num_classes, class_names=class_names, pretrained=pretrained, optimizer=optimizer, lr=lr, lrf=lrf, schedule=schedule, momentum=momentum, weight_decay=weight_decay, warmup_epochs=warmup_epochs, min_warmup_steps=min_warmup_steps, warmup_momentum=warmup_momentum, warmup_bias_lr=warmup_bias_lr, box_gain=box_gain, cls_gain=cls_gain, dfl_gain=dfl_gain, e2e_weights=e2e_weights, ema_decay=ema_decay, ema_tau=ema_tau, close_mosaic=close_mosaic, conf=conf, iou=iou, max_det=max_det, plot_images=plot_images, coco_backend=coco_backend, channels_last=channels_last, compile=compile)
        self.last_mask_report: Any = None  # the last validation's mask coco_map result

    def build_criterion(self, e2e_weights: str, **gains: float) -> nn.Module:
        head = self.model.model[-1]
        if self.model.task != "segment":
            raise ConfigError(f"model.yaml={self.yaml_source}: its last row is {type(head).__name__}, not a Segment "
                              f"head; train seg takes a -seg YAML (yolov8n-seg.yaml, yolo11n-seg.yaml, ...), train det "
                              f"a detector YAML")
        seg = dict(gains, mask_gain=self._mask_gain if self._mask_gain is not None else gains["box_gain"])
        if head.has_one2one:
            return EndToEndLoss(self.model, weights=e2e_weights, loss=SegmentationLoss, **seg)
        return SegmentationLoss(self.model, **seg)

    def compute_loss(self, preds: Any, batch: dict[str, Any]) -> Any:
        return self.criterion(preds, batch["boxes"], batch["labels"], batch["masks"])

    # ---------------------------------------------------------------- validation
    @torch.no_grad()
    def detect(self, batch: dict[str, Any]) -> list[dict[str, Any]]:
        """Detections of a batch in original image pixels: per image ``{image_id, boxes, scores, labels,
        masks}`` (masks: COCO RLEs), and in network-input pixels ``input_boxes`` and ``input_masks``
        ((m, H, W) bool, for the pictures)."""
        hp = self.hparams
        found = segments_of_batch(self(batch["images"]), self.eval_model(), batch, conf=hp.conf, iou=hp.iou,
                                  max_det=hp.max_det, multi_label=True)
        return [{**with_rle(d), "input_boxes": d["input_boxes"], "input_masks": d["input_masks"]} for d in found]

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        fresh = self._samples is None
        super().validation_step(batch, batch_idx)
        if fresh and self._samples is not None:  # predictions.png outlines the true masks too
            for truth, masks in zip(self._samples["truths"], batch["masks"]):
                truth["masks"] = masks.cpu().numpy()

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
