"""Task-aligned assignment of anchors to ground-truth boxes (TOOD, Feng et al. 2021; YOLOv8's rule).

For each box, the candidate anchors are those whose centre lies inside it; each candidate's alignment
is ``score ** alpha * IoU ** beta`` (the predicted probability of the box's class and the CIoU of the
predicted box, clamped at 0). The ``topk`` best-aligned candidates become positives; an anchor claimed
by several boxes goes to the box its prediction overlaps most; with ``topk2`` below ``topk`` each box then
keeps only its ``topk2`` best-aligned positives (YOLO26's one-to-one branch: top-7 candidates, then the
single best, ultralytics' ``tal_topk2``). Class targets are the one-hot label scaled
by the alignment, normalised per box so that its best anchor's target equals that anchor's IoU with it.
Everything works on padded (B, M, ...) ground truth, with no loop over boxes or anchors.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.losses.boxes import ciou

__all__ = ["Assignment", "TaskAlignedAssigner", "anchors_in_boxes"]


@dataclass
class Assignment:
    """Targets per anchor: ``boxes`` (B, A, 4) xyxy, ``scores`` (B, A, C) soft class targets,
    ``foreground`` (B, A) bool, ``gt_index`` (B, A) index of the assigned box (0 where background)."""

    boxes: torch.Tensor
    scores: torch.Tensor
    foreground: torch.Tensor
    gt_index: torch.Tensor


def anchors_in_boxes(points: torch.Tensor, boxes: torch.Tensor, min_side: float = 0.0, eps: float = 1e-9
                     ) -> torch.Tensor:
    """Points (A, 2) and boxes (B, M, 4) xyxy -> (B, M, A) bool: the point lies strictly inside the box,
    whose sides are first widened about its centre to at least ``min_side`` (so tiny boxes get candidates)."""
    p = points.view(1, 1, -1, 2)
    centre, half = (boxes[..., :2] + boxes[..., 2:]) / 2, (boxes[..., 2:] - boxes[..., :2]) / 2
    half = half.clamp(min=min_side / 2)
    lt, rb = (centre - half).unsqueeze(2), (centre + half).unsqueeze(2)  # (B, M, 1, 2)
    return torch.cat((p - lt, rb - p), -1).amin(-1) > eps


class TaskAlignedAssigner(nn.Module):
    """Assign anchors to boxes by ``score ** alpha * IoU ** beta`` among the top-k candidates inside each box.

    Args:
        topk: positives per box (at most). topk2: positives kept per box after the claims of several boxes
            on one anchor are settled (None: ``topk``, no second cut). alpha: exponent of the class score. beta: exponent of the IoU.
        min_side: boxes narrower than this (in the boxes' units) look for candidates in a box widened to it
            about their centre (YOLOv8 uses the second level's stride, 16 px).
    """

    def __init__(self, topk: int = 10, alpha: float = 0.5, beta: float = 6.0, min_side: float = 0.0,
                 eps: float = 1e-9, topk2: int | None = None) -> None:
        super().__init__()
        if topk < 1 or (topk2 is not None and not 1 <= topk2 <= topk):
            raise ValueError(f"topk={topk}, topk2={topk2}: give topk >= 1 and 1 <= topk2 <= topk (or topk2=None)")
        self.topk, self.alpha, self.beta, self.min_side, self.eps = topk, alpha, beta, min_side, eps
        self.topk2 = topk if topk2 is None else topk2

    def candidates(self, points: torch.Tensor, gt_boxes: torch.Tensor, gt_mask: torch.Tensor,
                   **extra: torch.Tensor) -> torch.Tensor:
        """(B, M, A) bool: the anchor points (A, 2) inside each box (B, M, 4) xyxy, widened to ``min_side``."""
        return anchors_in_boxes(points, gt_boxes, self.min_side)

    def overlaps(self, gt_boxes: torch.Tensor, pred_boxes: torch.Tensor) -> torch.Tensor:
        """The overlap of boxes and predictions (broadcast, (..., 4) xyxy): their CIoU."""
        return ciou(gt_boxes, pred_boxes)

    def pair_overlaps(self, candidates: torch.Tensor, gt_boxes: torch.Tensor, pred_boxes: torch.Tensor,
                      **extra: torch.Tensor) -> torch.Tensor:
        """(B, M, A): the overlap (>= 0) of each box (B, M, .) with each prediction (B, A, .), 0 where the
        anchor is no candidate of the box."""
        overlaps = self.overlaps(gt_boxes.unsqueeze(2), pred_boxes.unsqueeze(1)).clamp_(min=0)  # (B, M, A)
        return torch.where(candidates, overlaps, 0.0)  # padding rows (zero boxes) give NaN: drop them

    @torch.no_grad()
    def forward(self, pred_scores: torch.Tensor, pred_boxes: torch.Tensor, points: torch.Tensor,
                gt_labels: torch.Tensor, gt_boxes: torch.Tensor, gt_mask: torch.Tensor,
                **extra: torch.Tensor) -> Assignment:
        """Predicted probabilities (B, A, C), predicted boxes (B, A, 4) xyxy, anchor points (A, 2) (same units
        as the boxes), padded ground truth: labels (B, M) int64, boxes (B, M, 4) xyxy, mask (B, M) bool;
        ``extra``: what a subclass's candidates and overlaps read (e.g. keypoints)."""
        b, a, c = pred_scores.shape
        m = gt_boxes.shape[1]
        if m == 0:
            return Assignment(torch.zeros_like(pred_boxes), torch.zeros_like(pred_scores),
                              torch.zeros(b, a, dtype=torch.bool, device=pred_scores.device),
                              torch.zeros(b, a, dtype=torch.long, device=pred_scores.device))
        pred_scores, pred_boxes, gt_boxes = pred_scores.float(), pred_boxes.float(), gt_boxes.float()
        labels = gt_labels.clamp(0, c - 1)
        candidates = self.candidates(points.float(), gt_boxes, gt_mask, **extra) & gt_mask.unsqueeze(-1)  # (B, M, A)
        overlaps = self.pair_overlaps(candidates, gt_boxes, pred_boxes, **extra)  # (B, M, A)
        scores = pred_scores.transpose(1, 2).gather(1, labels.unsqueeze(-1).expand(b, m, a))  # (B, M, A)
        align = scores.pow(self.alpha) * overlaps.pow(self.beta) * candidates

        k = min(self.topk, a)
        top = align.topk(k, dim=-1).indices  # (B, M, k)
        positive = torch.zeros_like(candidates).scatter_(-1, top, True) & candidates  # (B, M, A)

        claims = positive.sum(1)  # (B, A): boxes claiming each anchor
        best = F.one_hot(overlaps.argmax(1), m).transpose(1, 2).bool()  # (B, M, A): the box it overlaps most
        positive = torch.where((claims > 1).unsqueeze(1), best, positive)
        if self.topk2 < self.topk:  # the second cut: each box keeps its topk2 best-aligned positives
            top2 = (align * positive).topk(min(self.topk2, a), dim=-1).indices
            positive = positive & torch.zeros_like(positive).scatter_(-1, top2, True)
        foreground = positive.any(1)  # (B, A)
        gt_index = positive.to(torch.uint8).argmax(1)  # (B, A)

        target_labels = labels.gather(1, gt_index)  # (B, A)
        target_boxes = gt_boxes.gather(1, gt_index.unsqueeze(-1).expand(b, a, gt_boxes.shape[-1]))  # (B, A, 4)
        align = align * positive
        norm = align * (overlaps * positive).amax(-1, keepdim=True) / (align.amax(-1, keepdim=True) + self.eps)
        target_scores = F.one_hot(target_labels, c).float() * (norm.amax(1) * foreground).unsqueeze(-1)
        return Assignment(target_boxes, target_scores, foreground, gt_index)
