"""A detector with its non-maximum suppression, as one graph for one image.

(1, 3, H, W) -> (N, 6) rows ``x1, y1, x2, y2, score, class`` in input pixels, by falling score: each
anchor keeps its best class, those above ``conf`` go through class-wise NMS at IoU ``iou``
(``torchvision.ops.batched_nms``, which the TorchScript exporter writes as ONNX NonMaxSuppression), at
most ``max_det`` remain. The same selection as :func:`vision_attn.models.yolo.postprocess.postprocess`
with ``multi_label=False``. N depends on the image, which torch.export cannot capture: export it with the
TorchScript exporter, batch 1.
"""
from __future__ import annotations

import torch
from torch import nn
from torchvision.ops import batched_nms, box_convert

__all__ = ["DetectorWithNMS"]


class DetectorWithNMS(nn.Module):
    """``detector`` (eval output (1, 4 + nc, A)) followed by NMS: (1, 3, H, W) -> (N, 6)."""

    def __init__(self, detector: nn.Module, *, conf: float = 0.25, iou: float = 0.7, max_det: int = 300) -> None:
        super().__init__()
        self.detector, self.conf, self.iou, self.max_det = detector, conf, iou, max_det

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pred = self.detector(x)[0].transpose(0, 1)  # (A, 4 + nc)
        boxes = box_convert(pred[:, :4], "cxcywh", "xyxy")
        scores, labels = pred[:, 4:].max(1)
        keep = (scores > self.conf).nonzero().squeeze(1)
        boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
        kept = batched_nms(boxes, scores, labels, self.iou)[: self.max_det]
        return torch.cat([boxes[kept], scores[kept, None], labels[kept, None].to(boxes.dtype)], 1)
