"""Hungarian matching of DETR-style queries to ground-truth boxes.

A DETR decoder predicts a fixed set of Q queries; its loss pairs each ground-truth box with exactly one
query, the pairing of least total cost (the assignment problem, solved by
``scipy.optimize.linear_sum_assignment`` per image). The cost of query q for box t is

    class_cost * focal(q, t) + l1_cost * |box_q - box_t|_1 + giou_cost * (1 - GIoU(box_q, box_t))

with the focal term ``alpha (1 - p)^gamma (-log p) - (1 - alpha) p^gamma (-log(1 - p))`` on the sigmoid
probability p of the box's class (ultralytics' ``HungarianMatcher`` with ``use_fl``; costs 2, 5, 2 as in
RT-DETR). Boxes are ``(cx, cy, w, h)`` normalised to the input's size. Non-finite costs count as 0.

The costs of every layer and image are computed in one batched pass (K layers, B images, Q queries,
M padded targets) and moved to the CPU once; only the solver runs per (layer, image).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

__all__ = ["HungarianMatcher", "Matches", "box_iou_giou"]


def box_iou_giou(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-7) -> tuple[torch.Tensor, torch.Tensor]:
    """IoU and generalised IoU of boxes a (..., 4) and b (..., 4), both cxcywh, broadcast -> two (...) tensors.

    ``eps`` is added to the union and to the enclosing box's area (as ultralytics' ``bbox_iou``)."""
    a_half, b_half = a[..., 2:] / 2, b[..., 2:] / 2
    a_lo, a_hi = a[..., :2] - a_half, a[..., :2] + a_half  # (..., 2) corners
    b_lo, b_hi = b[..., :2] - b_half, b[..., :2] + b_half
    inter_wh = (torch.minimum(a_hi, b_hi) - torch.maximum(a_lo, b_lo)).clamp(min=0)
    inter = inter_wh[..., 0] * inter_wh[..., 1]
    union = a[..., 2] * a[..., 3] + b[..., 2] * b[..., 3] - inter + eps
    iou = inter / union
    hull_wh = torch.maximum(a_hi, b_hi) - torch.minimum(a_lo, b_lo)
    hull = hull_wh[..., 0] * hull_wh[..., 1] + eps
    return iou, iou - (hull - union) / hull


@dataclass(frozen=True)
class Matches:
    """Matched (query, target) pairs, flat over layers and images, all (P,) int64 on the predictions'
    device: ``layer`` and ``image`` say where the pair is, ``query`` the query's index in its image,
    ``target`` the box's index among the image's targets (0 .. n_i - 1). Within a (layer, image) the
    pairs are sorted by query. ``per_layer`` is the number of pairs of each layer (the same for all)."""

    layer: torch.Tensor
    image: torch.Tensor
    query: torch.Tensor
    target: torch.Tensor
    per_layer: int


class HungarianMatcher:
    """One-to-one assignment of queries to targets by least total cost (see the module's docstring).

    Args:
        class_cost, l1_cost, giou_cost: weights of the focal class cost, the L1 box distance and 1 - GIoU.
        alpha, gamma: the focal class cost's balance and focusing parameters.
    """

    def __init__(self, *, class_cost: float = 2.0, l1_cost: float = 5.0, giou_cost: float = 2.0,
                 alpha: float = 0.25, gamma: float = 2.0) -> None:
        self.class_cost, self.l1_cost, self.giou_cost = class_cost, l1_cost, giou_cost
        self.alpha, self.gamma = alpha, gamma

    def cost(self, pred_boxes: torch.Tensor, pred_logits: torch.Tensor, gt_boxes: torch.Tensor,
             gt_labels: torch.Tensor) -> torch.Tensor:
        """Pairwise costs (K, B, Q, M) of predictions (K, B, Q, 4) cxcywh and logits (K, B, Q, nc) for
        padded targets (B, M, 4) cxcywh and labels (B, M); no gradient, float32, non-finite set to 0.

        The costs are elementwise over 10^5..10^6 pairs, where fresh full-size temporaries would cost more
        than the arithmetic: each step writes into one of a few buffers, in ultralytics' order of operations."""
        with torch.no_grad():
            k, b, q, _ = pred_logits.shape
            m = gt_labels.shape[1]
            boxes = pred_boxes.detach().float()
            gt = gt_boxes.float()
            # focal class cost on the probability of each target's class at every query: (K, B, Q, M)
            index = gt_labels.view(1, b, 1, m).expand(k, b, q, m)
            p = pred_logits.detach().float().gather(3, index).sigmoid_()
            one_minus = torch.sub(1, p)
            log_p = torch.add(p, 1e-8).log_()
            log_q = torch.add(one_minus, 1e-8).log_()
            pos = one_minus.pow_(self.gamma).mul_(self.alpha).mul_(log_p.neg_())  # alpha (1-p)^g (-log p)
            neg = p.pow_(self.gamma).mul_(1 - self.alpha).mul_(log_q.neg_())  # (1-alpha) p^g (-log(1-p))
            cost = pos.sub_(neg).mul_(self.class_cost)
            # L1 distance of the cxcywh vectors: (K, B, Q, M)
            l1 = torch.cdist(boxes.reshape(k * b, q, 4), gt.repeat(k, 1, 1), p=1.0).view(k, b, q, m)
            cost.add_(l1.mul_(self.l1_cost))
            # 1 - GIoU: corners (K, B, Q, 1) of the queries against (1, B, 1, M) of the targets
            a_half, g_half = boxes[..., 2:] / 2, gt[..., 2:] / 2
            a_lo, a_hi = (boxes[..., :2] - a_half).unsqueeze(3), (boxes[..., :2] + a_half).unsqueeze(3)
            g_lo, g_hi = (gt[..., :2] - g_half).view(1, b, 1, m, 2), (gt[..., :2] + g_half).view(1, b, 1, m, 2)
            buf_a, buf_b, buf_c, buf_d = log_p, log_q, l1, neg  # free now: the scratch buffers
            inter = torch.minimum(a_hi[..., 0], g_hi[..., 0], out=buf_a)
            inter.sub_(torch.maximum(a_lo[..., 0], g_lo[..., 0], out=buf_b)).clamp_(min=0)
            inter_h = torch.minimum(a_hi[..., 1], g_hi[..., 1], out=buf_b)
            inter.mul_(inter_h.sub_(torch.maximum(a_lo[..., 1], g_lo[..., 1], out=buf_c)).clamp_(min=0))
            area_a, area_g = (boxes[..., 2] * boxes[..., 3]).unsqueeze(3), (gt[..., 2] * gt[..., 3]).view(1, b, 1, m)
            union = torch.add(area_a, area_g, out=buf_b).sub_(inter).add_(1e-7)
            iou = inter.div_(union)
            hull = torch.maximum(a_hi[..., 0], g_hi[..., 0], out=buf_c)
            hull.sub_(torch.minimum(a_lo[..., 0], g_lo[..., 0], out=buf_d))
            hull_h = torch.maximum(a_hi[..., 1], g_hi[..., 1], out=buf_d)
            hull.mul_(hull_h.sub_(torch.minimum(a_lo[..., 1], g_lo[..., 1]))).add_(1e-7)
            giou = iou.add_(union.sub_(hull).div_(hull))  # iou - (hull - union) / hull
            cost.add_(giou.neg_().add_(1).mul_(self.giou_cost))
            return cost.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)

    def __call__(self, pred_boxes: torch.Tensor, pred_logits: torch.Tensor, gt_boxes: torch.Tensor,
                 gt_labels: torch.Tensor, counts: Sequence[int]) -> Matches:
        """Match predictions (K, B, Q, 4) cxcywh and logits (K, B, Q, nc) of K layers to padded targets
        (B, M, 4) cxcywh and labels (B, M) of which the first ``counts[i]`` are image i's; each layer is
        matched on its own. min(Q, n_i) pairs per (layer, image)."""
        k, b, q = pred_logits.shape[:3]
        device = pred_logits.device
        if sum(counts) == 0:
            empty = torch.zeros(0, dtype=torch.long, device=device)
            return Matches(empty, empty, empty, empty, 0)
        from scipy.optimize import linear_sum_assignment  # here: scipy.optimize takes ~1 s to import

        cost = self.cost(pred_boxes, pred_logits, gt_boxes, gt_labels).cpu().numpy()  # (K, B, Q, M)
        queries, targets, images, layers = [], [], [], []
        for layer in range(k):  # the solver: one call per (layer, image) with boxes
            for image, n in enumerate(counts):
                if n == 0:
                    continue
                rows, cols = linear_sum_assignment(cost[layer, image, :, :n])
                queries.append(rows)
                targets.append(cols)
                images.append(np.full(len(rows), image))
                layers.append(np.full(len(rows), layer))
        flat = np.stack([np.concatenate(x) for x in (layers, images, queries, targets)]).astype(np.int64)
        layer, image, query, target = torch.from_numpy(flat).to(device).unbind(0)  # one copy to the device
        return Matches(layer, image, query, target, per_layer=sum(min(q, n) for n in counts))
