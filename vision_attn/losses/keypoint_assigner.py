"""Task-aligned assignment whose overlap is keypoint similarity (YOLO26's keypoint loss; ultralytics'
``PoseTaskAlignedAssigner``).

The rule of :class:`~vision_attn.losses.assigner.TaskAlignedAssigner` with two changes. The overlap of a
box with a candidate anchor is the object keypoint similarity of the anchor's predicted keypoints with
the box's labelled ones (each keypoint ``exp(-d^2 / (2 * (2 sigma)^2 * area))``, ``area`` 0.53 times the
box's, averaged over the labelled keypoints), or the CIoU for a box without labelled keypoints; so
positives and the class targets favour anchors with accurate keypoints. Since keypoint similarity has no
sense of scale, a box is a candidate only on the pyramid levels whose stride s fits its size:
``2 s <= sqrt(area) <= 12 s`` (the finest level open below, the coarsest above), unless that leaves it no
candidate at all.
"""
from __future__ import annotations

import torch

from vision_attn.losses.assigner import TaskAlignedAssigner

__all__ = ["KeypointTaskAlignedAssigner"]

LEVEL_RANGE = (2.0, 12.0)
"""A box fits the levels whose stride s has ``lo * s <= sqrt(area) <= hi * s``."""
AREA_SCALE = 0.53
"""The fraction of a box's area taken as the object's area in the similarity (COCO's keypoint evaluation
uses the segment's area, about 0.53 of the box's for people)."""


class KeypointTaskAlignedAssigner(TaskAlignedAssigner):
    """:class:`TaskAlignedAssigner` with keypoint similarity as the overlap and a pyramid-level gate.

    Args: ``sigmas`` (K,) the keypoints' OKS sigmas, then those of :class:`TaskAlignedAssigner`.

    Extra inputs (keywords of ``forward``): ``pred_kpts`` (B, A, K, 2) and ``gt_kpts`` (B, M, K, 3) (x, y,
    visibility) in the boxes' units, ``anchor_strides`` (A,).
    """

    def __init__(self, sigmas: torch.Tensor, **kwargs: float | int | None) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.register_buffer("sigmas", torch.as_tensor(sigmas, dtype=torch.float32), persistent=False)

    def candidates(self, points: torch.Tensor, gt_boxes: torch.Tensor, gt_mask: torch.Tensor,
                   **extra: torch.Tensor) -> torch.Tensor:
        inside = super().candidates(points, gt_boxes, gt_mask)
        s = extra["anchor_strides"].view(1, 1, -1).to(gt_boxes.dtype)
        side = (gt_boxes[..., 2:] - gt_boxes[..., :2]).prod(-1, keepdim=True).clamp(min=0).sqrt()  # (B, M, 1)
        lo, hi = LEVEL_RANGE
        gated = inside & ((side >= lo * s) | (s == s.min())) & ((side <= hi * s) | (s == s.max()))
        return torch.where(gated.any(-1, keepdim=True), gated, inside)

    def pair_overlaps(self, candidates: torch.Tensor, gt_boxes: torch.Tensor, pred_boxes: torch.Tensor,
                      **extra: torch.Tensor) -> torch.Tensor:
        overlaps = super().pair_overlaps(candidates, gt_boxes, pred_boxes)
        b, g, a = candidates.nonzero(as_tuple=True)
        gt = extra["gt_kpts"][b, g].float()  # (P, K, 3)
        labelled = gt[..., 2] > 0
        area = (gt_boxes[b, g, 2:] - gt_boxes[b, g, :2]).prod(-1, keepdim=True) * AREA_SCALE
        d = (extra["pred_kpts"][b, a].float() - gt[..., :2]).pow(2).sum(-1)
        e = d / ((2 * self.sigmas.to(d.device)).pow(2) * (area + self.eps) * 2)
        oks = ((-e).exp() * labelled).sum(-1) / labelled.sum(-1).clamp(min=1)
        out = overlaps.clone()
        out[b, g, a] = torch.where(labelled.any(-1), oks.to(overlaps.dtype), overlaps[b, g, a])
        return out
