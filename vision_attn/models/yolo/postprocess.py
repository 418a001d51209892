"""Detections from the decoded head output: confidence threshold, pre-NMS top-k, class-wise NMS
(``torchvision.ops.batched_nms``), a cap per image, and the way back to original image pixels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torchvision.ops import batched_nms, box_convert

__all__ = ["Detections", "postprocess", "to_original"]


@dataclass
class Detections:
    """One image's detections: ``boxes`` (N, 4) xyxy pixels, ``scores`` (N,), ``labels`` (N,) int64,
    sorted by falling score."""

    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.scores.numel())


def postprocess(pred: torch.Tensor, *, conf: float = 0.25, iou: float = 0.7, max_det: int = 300,
                pre_nms: int = 30000, multi_label: bool = False, agnostic: bool = False) -> list[Detections]:
    """Decoded output (B, 4 + nc, A) (``cx, cy, w, h`` pixels, class probabilities) -> one
    :class:`Detections` per image.

    ``conf``: the lowest class probability kept (0.001 for mAP, 0.25 to show boxes); ``multi_label``:
    a box may appear once per class above ``conf`` (what mAP evaluation uses), else only with its best
    class; ``pre_nms``: candidates kept per image (highest scores) before NMS at IoU ``iou``;
    ``agnostic``: NMS across classes; ``max_det``: detections kept per image.
    """
    if pred.ndim != 3 or pred.shape[1] < 5:
        raise ValueError(f"expected the decoded head output (B, 4 + nc, A), got {tuple(pred.shape)}")
    pred = pred.detach().float().transpose(1, 2)  # (B, A, 4 + nc)
    boxes_all = box_convert(pred[..., :4], "cxcywh", "xyxy")
    probs_all = pred[..., 4:]
    out = []
    for boxes, probs in zip(boxes_all, probs_all):  # one image at a time: each keeps a different count
        if multi_label:
            anchor, label = (probs > conf).nonzero(as_tuple=True)
            scores = probs[anchor, label]
        else:
            scores, label = probs.max(1)
            anchor = (scores > conf).nonzero(as_tuple=True)[0]
            scores, label = scores[anchor], label[anchor]
        if scores.numel() > pre_nms:
            scores, top = scores.topk(pre_nms)
            anchor, label = anchor[top], label[top]
        boxes_i = boxes[anchor]
        keep = batched_nms(boxes_i, scores, torch.zeros_like(label) if agnostic else label, iou)[:max_det]
        out.append(Detections(boxes_i[keep], scores[keep], label[keep]))
    return out


def to_original(boxes: torch.Tensor, *, scale: float | Sequence[float] | torch.Tensor, pad: Sequence[float],
                orig_size: Sequence[int]) -> torch.Tensor:
    """Boxes (N, 4) xyxy in network-input pixels -> original image pixels: ``(box - pad) / scale``,
    clipped to the image. ``scale``: one factor or (sx, sy); ``pad``: (left, top); ``orig_size``: (h, w)."""
    factors = torch.as_tensor(scale, dtype=torch.float64).flatten().tolist()
    sx, sy = factors[0], factors[-1]
    left, top = float(pad[0]), float(pad[1])
    h, w = int(orig_size[0]), int(orig_size[1])
    shift = boxes.new_tensor([left, top, left, top])
    factor = boxes.new_tensor([sx, sy, sx, sy])
    out = (boxes - shift) / factor
    out[:, 0::2] = out[:, 0::2].clamp(0, w)
    out[:, 1::2] = out[:, 1::2].clamp(0, h)
    return out
