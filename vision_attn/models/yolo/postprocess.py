"""Detections from the decoded head output: confidence threshold, pre-NMS top-k, class-wise NMS
(``torchvision.ops.batched_nms``), a cap per image, and the way back to original image pixels.

An end-to-end head (YOLO26, YOLOv10: :func:`is_end_to_end`) decodes its one-to-one branch, which was
trained to give each object one box: its detections are a top-k, not an NMS (ultralytics' end-to-end
``Detect.postprocess``): the ``max_det`` anchors with the highest class probability, then the
``max_det`` best (anchor, class) pairs among them (one class per anchor with ``agnostic``), then the
confidence threshold. :func:`topk_pairs` is that selection as tensor operations, shared with the
ONNX export. :func:`postprocess_rotated` does the same for an oriented-box head's rotated boxes, with
rotated NMS.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torchvision.ops import batched_nms, box_convert

from vision_attn.models.yolo.rotated import regularize, rotated_nms

__all__ = ["Detections", "RotatedDetections", "postprocess", "postprocess_rotated", "to_original",
           "keypoints_to_original", "rotated_to_original", "topk_anchors", "topk_pairs", "is_end_to_end"]


@dataclass
class Detections:
    """One image's detections: ``boxes`` (N, 4) xyxy pixels, ``scores`` (N,), ``labels`` (N,) int64,
    sorted by falling score; ``coeffs`` (N, nm) the mask coefficients of a segmentation model's
    detections (``postprocess(..., nm=nm)``), else None."""

    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor
    coeffs: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.scores.numel())


def is_end_to_end(model: torch.nn.Module) -> bool:
    """Whether a detector (or its head) predicts end to end: its eval output is the one-to-one branch's,
    to be read with a top-k (:func:`postprocess` with ``end2end=True``), not NMS."""
    head = model.model[-1] if hasattr(model, "model") else model
    return bool(getattr(head, "end2end", False))


def topk_pairs(pred: torch.Tensor, max_det: int, agnostic: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Decoded output (B, 4 + nc, A) -> the ``k = min(max_det, A)`` best detections of each image without
    NMS, by falling score: boxes (B, k, 4) xyxy pixels, scores (B, k), labels (B, k) int64. The k anchors
    of highest class probability, then the k best (anchor, class) pairs among them (an anchor may come
    twice, with two classes); ``agnostic``: each anchor once, with its best class."""
    boxes, scores, labels, _ = topk_anchors(pred, max_det, agnostic)
    return boxes, scores, labels


def topk_anchors(pred: torch.Tensor, max_det: int, agnostic: bool = False, nm: int = 0
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`topk_pairs` of (B, 4 + nc + nm, A) (``nm`` trailing mask-coefficient channels, left out of
    the class scores), also giving each detection's anchor index (B, k) (to gather its coefficients)."""
    pred = pred.transpose(1, 2)  # (B, A, 4 + nc + nm)
    boxes, probs = box_convert(pred[..., :4], "cxcywh", "xyxy"), pred[..., 4:pred.shape[-1] - nm]
    nc, k = probs.shape[-1], min(max_det, pred.shape[1])
    if agnostic:
        best, labels = probs.max(-1)
        scores, anchor = best.topk(k, dim=1)
        labels = labels.gather(1, anchor)
    else:
        top = probs.amax(-1).topk(k, dim=1).indices  # (B, k) anchors
        scores, flat = probs.gather(1, top.unsqueeze(-1).expand(-1, -1, nc)).flatten(1).topk(k, dim=1)
        labels, anchor = flat % nc, top.gather(1, flat // nc)
    return boxes.gather(1, anchor.unsqueeze(-1).expand(-1, -1, 4)), scores, labels, anchor


def _candidates(probs: torch.Tensor, conf: float, multi_label: bool, pre_nms: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One image's class probabilities (A, nc) -> the (anchor, score, label) candidates above ``conf``
    (every class above it with ``multi_label``, else the best), the ``pre_nms`` best."""
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
    return anchor, scores, label


def postprocess(pred: torch.Tensor, *, conf: float = 0.25, iou: float = 0.7, max_det: int = 300,
                pre_nms: int = 30000, multi_label: bool = False, agnostic: bool = False,
                end2end: bool = False, nm: int = 0) -> list[Detections]:
    """Decoded output (B, 4 + nc, A) (``cx, cy, w, h`` pixels, class probabilities) -> one
    :class:`Detections` per image.

    ``conf``: the lowest class probability kept (0.001 for mAP, 0.25 to show boxes); ``multi_label``:
    a box may appear once per class above ``conf`` (what mAP evaluation uses), else only with its best
    class; ``pre_nms``: candidates kept per image (highest scores) before NMS at IoU ``iou``;
    ``agnostic``: NMS across classes; ``max_det``: detections kept per image.

    ``end2end`` (the output of an end-to-end head, :func:`is_end_to_end`): no NMS, the top-k of
    :func:`topk_pairs` above ``conf`` (``iou``, ``pre_nms`` and ``multi_label`` do not apply; ``agnostic``
    keeps each anchor once).

    ``nm``: a segmentation head's output (B, 4 + nc + nm, A) (the ``pred`` of its ``(pred, protos)``):
    the last ``nm`` channels are mask coefficients, not classes; each image's detections then carry
    theirs as ``coeffs`` (N, nm), for :func:`vision_attn.models.yolo.masks.instance_masks`.
    """
    if pred.ndim != 3 or pred.shape[1] < 5 + nm:
        layout = f"(B, 4 + nc + {nm}, A)" if nm else "(B, 4 + nc, A)"
        raise ValueError(f"expected the decoded head output {layout}, got {tuple(pred.shape)}")
    if end2end:
        boxes, scores, labels, anchor = topk_anchors(pred.detach().float(), max_det, agnostic, nm)
        keep = scores > conf
        coeffs = pred.detach().float()[:, pred.shape[1] - nm:].transpose(1, 2)  # (B, A, nm)
        return [Detections(b[m], s[m], lb[m], c[a[m]] if nm else None)
                for b, s, lb, m, a, c in zip(boxes, scores, labels, keep, anchor, coeffs)]
    pred = pred.detach().float().transpose(1, 2)  # (B, A, 4 + nc + nm)
    boxes_all = box_convert(pred[..., :4], "cxcywh", "xyxy")
    probs_all = pred[..., 4:pred.shape[-1] - nm]
    coeffs_all = pred[..., pred.shape[-1] - nm:]
    out = []
    for boxes, probs, coeffs in zip(boxes_all, probs_all, coeffs_all):  # one image at a time
        anchor, scores, label = _candidates(probs, conf, multi_label, pre_nms)
        boxes_i = boxes[anchor]
        keep = batched_nms(boxes_i, scores, torch.zeros_like(label) if agnostic else label, iou)[:max_det]
        out.append(Detections(boxes_i[keep], scores[keep], label[keep], coeffs[anchor[keep]] if nm else None))
    return out


@dataclass
class RotatedDetections:
    """One image's oriented-box detections: ``boxes`` (N, 5) (cx, cy, w, h, angle) in pixels and radians,
    the angle in [0, pi/2) (:func:`~vision_attn.models.yolo.rotated.regularize`), ``scores`` (N,),
    ``labels`` (N,) int64, sorted by falling score."""

    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.scores.numel())


def postprocess_rotated(pred: torch.Tensor, *, conf: float = 0.25, iou: float = 0.7, max_det: int = 300,
                        pre_nms: int = 30000, multi_label: bool = False, agnostic: bool = False,
                        end2end: bool = False, method: str = "fast") -> list[RotatedDetections]:
    """An oriented-box head's output (B, 4 + nc + 1, A) (rotated cx, cy, w, h in pixels, class
    probabilities, angle) -> one :class:`RotatedDetections` per image.

    ``conf``, ``multi_label``, ``pre_nms``, ``agnostic``, ``max_det``, ``end2end``: as :func:`postprocess`.
    NMS (:func:`~vision_attn.models.yolo.rotated.rotated_nms`, on ProbIoU) within each class (across
    classes with ``agnostic``) at ``iou``; ``method`` ``"fast"`` as ultralytics predicts, ``"greedy"`` the
    classic rule.
    """
    if pred.ndim != 3 or pred.shape[1] < 6:
        raise ValueError(f"expected an oriented-box head's output (B, 4 + nc + 1, A), got {tuple(pred.shape)}")
    pred = pred.detach().float()
    if end2end:
        _, scores, labels, anchor = topk_anchors(pred, max_det, agnostic, nm=1)
        rows = pred.transpose(1, 2)
        rboxes = torch.cat((rows[..., :4], rows[..., -1:]), -1)  # (B, A, 5)
        keep = scores > conf
        return [RotatedDetections(regularize(r[a[m]]), s[m], lb[m])
                for r, s, lb, m, a in zip(rboxes, scores, labels, keep, anchor)]
    rows = pred.transpose(1, 2)  # (B, A, 4 + nc + 1)
    out = []
    for row in rows:
        anchor, scores, label = _candidates(row[:, 4:-1], conf, multi_label, pre_nms)
        rboxes = torch.cat((row[anchor, :4], row[anchor, -1:]), -1)
        groups = [torch.arange(len(label), device=label.device)] if agnostic else \
            [(label == c).nonzero(as_tuple=True)[0] for c in label.unique()]  # classes never suppress each other
        kept = torch.cat([g[rotated_nms(rboxes[g], scores[g], iou, method=method)] for g in groups]
                         or [label.new_zeros(0)])
        keep = kept[scores[kept].argsort(descending=True, stable=True)][:max_det]
        out.append(RotatedDetections(regularize(rboxes[keep]), scores[keep], label[keep]))
    return out


def _factors(scale: float | Sequence[float] | torch.Tensor) -> tuple[float, float]:
    """One letterbox factor or (sx, sy) -> (sx, sy)."""
    factors = torch.as_tensor(scale, dtype=torch.float64).flatten().tolist()
    return factors[0], factors[-1]


def to_original(boxes: torch.Tensor, *, scale: float | Sequence[float] | torch.Tensor, pad: Sequence[float],
                orig_size: Sequence[int]) -> torch.Tensor:
    """Boxes (N, 4) xyxy in network-input pixels -> original image pixels: ``(box - pad) / scale``,
    clipped to the image. ``scale``: one factor or (sx, sy); ``pad``: (left, top); ``orig_size``: (h, w)."""
    sx, sy = _factors(scale)
    left, top = float(pad[0]), float(pad[1])
    h, w = int(orig_size[0]), int(orig_size[1])
    shift = boxes.new_tensor([left, top, left, top])
    factor = boxes.new_tensor([sx, sy, sx, sy])
    out = (boxes - shift) / factor
    out[:, 0::2] = out[:, 0::2].clamp(0, w)
    out[:, 1::2] = out[:, 1::2].clamp(0, h)
    return out


def keypoints_to_original(kpts: torch.Tensor, *, scale: float | Sequence[float] | torch.Tensor,
                          pad: Sequence[float], orig_size: Sequence[int]) -> torch.Tensor:
    """Keypoints (..., K, D) (x, y in network-input pixels[, visibility]) -> x, y in original image pixels,
    clipped to the image (the letterbox geometry of :func:`to_original`); a new tensor."""
    sx, sy = _factors(scale)
    out = kpts.clone()
    out[..., 0] = ((kpts[..., 0] - float(pad[0])) / sx).clamp(0, int(orig_size[1]))
    out[..., 1] = ((kpts[..., 1] - float(pad[1])) / sy).clamp(0, int(orig_size[0]))
    return out


def rotated_to_original(rboxes: torch.Tensor, *, scale: float | Sequence[float] | torch.Tensor,
                        pad: Sequence[float]) -> torch.Tensor:
    """Rotated boxes (N, 5) in network-input pixels -> original image pixels: the centre moved by the
    padding, centre and size divided by the scale (x and w by sx, y and h by sy), the angle kept; not
    clipped (a rotated box may reach past the image). A new tensor."""
    sx, sy = _factors(scale)
    out = rboxes.clone()
    out[:, 0] = (rboxes[:, 0] - float(pad[0])) / sx
    out[:, 1] = (rboxes[:, 1] - float(pad[1])) / sy
    out[:, 2] = rboxes[:, 2] / sx
    out[:, 3] = rboxes[:, 3] / sy
    return out
