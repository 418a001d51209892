"""A detector or segmenter with its non-maximum suppression, as one graph for one image.

Detector: (1, 3, H, W) -> (N, 6) rows ``x1, y1, x2, y2, score, class`` in input pixels, by falling
score: each anchor keeps its best class, those above ``conf`` go through class-wise NMS at IoU ``iou``
(``torchvision.ops.batched_nms``, which the TorchScript exporter writes as ONNX NonMaxSuppression), at
most ``max_det`` remain. The same selection as :func:`vision_attn.models.yolo.postprocess.postprocess`
with ``multi_label=False``. N depends on the image, which torch.export cannot capture: export it with the
TorchScript exporter, batch 1.

Segmenter: the same rows, and ``masks`` (N, H/4, W/4): each kept instance's mask logits
``coeffs @ protos`` at the prototypes' resolution. Prediction's masks are these resized to the input
(bilinear), above 0 (probability 0.5) and inside the instance's box:
:func:`~vision_attn.models.yolo.masks.instance_masks` on the graph's outputs, or the same three steps
in any language. (Resizing before cropping keeps the box's edge sharp; resizing logits rather than
probabilities keeps the threshold's edge where PyTorch puts it.)
"""
from __future__ import annotations

import torch
from torch import nn
from torchvision.ops import batched_nms, box_convert

from vision_attn.models.yolo.masks import mask_logits

__all__ = ["DetectorWithNMS", "SegmenterWithNMS"]


class DetectorWithNMS(nn.Module):
    """``detector`` (eval output (1, 4 + nc, A)) followed by NMS: (1, 3, H, W) -> (N, 6)."""

    def __init__(self, detector: nn.Module, *, conf: float = 0.25, iou: float = 0.7, max_det: int = 300) -> None:
        super().__init__()
        self.detector, self.conf, self.iou, self.max_det = detector, conf, iou, max_det

    def select(self, pred: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One image's rows (A, 4 + nc) -> the (N, 6) detections and the anchors they come from (N,)."""
        boxes = box_convert(pred[:, :4], "cxcywh", "xyxy")
        scores, labels = pred[:, 4:].max(1)
        keep = (scores > self.conf).nonzero().squeeze(1)
        kept = keep[batched_nms(boxes[keep], scores[keep], labels[keep], self.iou)[: self.max_det]]
        return torch.cat([boxes[kept], scores[kept, None], labels[kept, None].to(boxes.dtype)], 1), kept

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.select(self.detector(x)[0].transpose(0, 1))[0]  # (A, 4 + nc) -> (N, 6)


class SegmenterWithNMS(DetectorWithNMS):
    """``segmenter`` (eval output ((1, 4 + nc + nm, A), (1, nm, Hp, Wp))) followed by NMS:
    (1, 3, H, W) -> (N, 6) detections and their (N, Hp, Wp) mask logits."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        pred, protos = self.detector(x)
        nm = protos.shape[1]
        rows = pred[0].transpose(0, 1)  # (A, 4 + nc + nm)
        dets, kept = self.select(rows[:, :-nm])
        return dets, mask_logits(protos[0], rows[kept, -nm:])  # (N, 6), (N, Hp, Wp)
