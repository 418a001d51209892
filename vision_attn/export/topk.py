"""An end-to-end detector (YOLO26, YOLOv10) with its NMS-free selection, as one graph.

(B, 3, H, W) -> (B, K, 6) rows ``x1, y1, x2, y2, score, class`` in input pixels, by falling score,
``K = min(max_det, anchors)``: the top-k of the one-to-one branch
(:func:`vision_attn.models.yolo.postprocess.topk_pairs`, ultralytics' end-to-end ``Detect.postprocess``),
no NMS. The shape is fixed, so the graph exports with either exporter and any batch; keep the rows whose
score is above your confidence threshold (what ``postprocess(end2end=True)`` does).
"""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.models.yolo.postprocess import topk_pairs

__all__ = ["DetectorWithTopK"]


class DetectorWithTopK(nn.Module):
    """``detector`` (eval output (B, 4 + nc, A) of its one-to-one branch) followed by the top-k: (B, K, 6)."""

    def __init__(self, detector: nn.Module, *, max_det: int = 300) -> None:
        super().__init__()
        self.detector, self.max_det = detector, max_det

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        boxes, scores, labels = topk_pairs(self.detector(x), self.max_det)
        return torch.cat([boxes, scores.unsqueeze(-1), labels.unsqueeze(-1).to(boxes.dtype)], -1)
