"""The RT-DETR loss: set prediction with Hungarian matching, a varifocal class term and L1 + GIoU box
terms, on the last decoder layer, on every earlier layer and the encoder's top-k queries (auxiliary), and
on the denoising queries (whose targets are known, not matched).

Each layer's queries are matched one-to-one to the ground truth (:class:`HungarianMatcher`, costs class
2, L1 5, GIoU 2). On the matched pairs, with n the number of pairs:

* class: varifocal loss, ``sum(BCE(logit, t) * w) / n`` over all queries and classes, where the target t
  is the IoU of the matched (detached) box in its target's class and 0 elsewhere, and the weight w is t
  there and ``alpha * sigmoid(logit)^gamma`` elsewhere (alpha 0.25, gamma 1.5). A batch without any box
  has no positive: the term is ultralytics' focal loss on all-zero targets, whose negatives weigh
  ``1 - alpha`` (0.75) instead, summed over all queries and classes;
* L1: ``sum |box - target|_1 / n`` on the normalised cxcywh vectors;
* GIoU: ``sum (1 - GIoU) / n``.

The total is ``class_gain * class + l1_gain * L1 + giou_gain * GIoU`` (gains 1, 5, 2) summed over the last
decoder layer, the auxiliary layers and the denoising layers, as ultralytics'
``RTDETRDetectionLoss(use_vfl=True)`` on what its ``RTDETRDetectionModel.loss`` passes it.

Input: the decoder's training output ``(dec_bboxes, dec_scores, enc_bboxes, enc_scores, dn_meta)`` as
ultralytics' ``RTDETRDecoder`` returns it: ``dec_bboxes`` (L, B, num_dn + Q, 4) sigmoid cxcywh in [0, 1]
of the input's size, ``dec_scores`` (L, B, num_dn + Q, nc) logits (the denoising queries first, split off
by ``dn_meta["dn_num_split"]``), ``enc_bboxes`` (B, Q, 4) and ``enc_scores`` (B, Q, nc) of the encoder's
top-k queries, and ``dn_meta`` (None without denoising). The ground truth in vision_attn's convention:
per-image ``boxes`` (n_i, 4) xyxy in input pixels and ``labels`` (n_i,) int64, plus the input's (H, W);
they are converted here to normalised cxcywh.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import ConfigError, DataError
from vision_attn.losses.batch import BatchLoss
from vision_attn.losses.detection import pad_targets
from vision_attn.losses.matcher import HungarianMatcher, Matches, box_iou_giou

__all__ = ["DETRLossParts", "RTDETRLoss", "detr_targets"]


@dataclass
class DETRLossParts:
    """``total`` (with gradients) = class_gain * cls + l1_gain * l1 + giou_gain * giou + aux + dn.

    ``cls``, ``l1``, ``giou``: the last decoder layer's terms, unweighted; ``aux``: the weighted terms of
    the auxiliary layers (encoder top-k and every decoder layer but the last), summed; ``dn``: the
    weighted terms of the denoising queries over all decoder layers, summed (0 without denoising).
    ``terms``: the twelve weighted terms under ultralytics' names (``loss_class``, ``loss_bbox``,
    ``loss_giou``, then ``_aux``, ``_dn`` and ``_aux_dn`` variants). All but ``total`` are detached."""

    total: torch.Tensor
    cls: torch.Tensor
    l1: torch.Tensor
    giou: torch.Tensor
    aux: torch.Tensor
    dn: torch.Tensor
    terms: dict[str, torch.Tensor]


def detr_targets(boxes: Sequence[torch.Tensor], labels: Sequence[torch.Tensor], input_size: Sequence[int],
                 device: torch.device | None = None) -> dict[str, Any]:
    """Per-image boxes (n_i, 4) xyxy in input pixels and labels (n_i,) -> the flat targets RT-DETR's
    decoder takes for its denoising groups (ultralytics' layout): ``cls`` (N,) int64, ``bboxes`` (N, 4)
    cxcywh normalised by the input's (H, W), ``batch_idx`` (N,) int64 and ``gt_groups`` (n_i per image)."""
    h, w = (float(s) for s in input_size)
    device = device if device is not None else (boxes[0].device if len(boxes) else torch.device("cpu"))
    counts = [len(x) for x in boxes]
    xyxy = torch.cat([x.to(device=device, dtype=torch.float32).view(-1, 4) for x in boxes]) if boxes else \
        torch.zeros(0, 4, device=device)
    scale = xyxy.new_tensor([w, h, w, h])
    cxcywh = torch.cat(((xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]), 1) / scale
    cls = torch.cat([x.to(device=device, dtype=torch.long).view(-1) for x in labels]) if labels else \
        torch.zeros(0, dtype=torch.long, device=device)
    batch_idx = torch.repeat_interleave(torch.arange(len(counts), device=device),
                                        torch.tensor(counts, dtype=torch.long, device=device))
    return {"cls": cls, "bboxes": cxcywh, "batch_idx": batch_idx, "gt_groups": counts}


def _xyxy_to_cxcywh(boxes: torch.Tensor, h: float, w: float) -> torch.Tensor:
    """(..., 4) xyxy pixels -> (..., 4) cxcywh normalised by (W, H, W, H)."""
    scale = boxes.new_tensor([w, h, w, h])
    return torch.cat(((boxes[..., :2] + boxes[..., 2:]) / 2, boxes[..., 2:] - boxes[..., :2]), -1) / scale


class RTDETRLoss(BatchLoss, nn.Module):
    """RT-DETR's loss (see the module's docstring); owns no parameters.

    Args:
        class_gain, l1_gain, giou_gain: weights of the varifocal, L1 and GIoU terms.
        class_cost, l1_cost, giou_cost: the matcher's cost weights.
        alpha, gamma: the varifocal term's (and the no-box focal term's) balance and focusing parameters.
        aux: add the auxiliary layers' terms (the encoder's top-k and the earlier decoder layers).
    """

    sum_over_images: ClassVar[bool] = False
    """The result is a mean over the matched boxes, used as it is (RT-DETR's trainer)."""

    def __init__(self, *, class_gain: float = 1.0, l1_gain: float = 5.0, giou_gain: float = 2.0,
                 class_cost: float = 2.0, l1_cost: float = 5.0, giou_cost: float = 2.0,
                 alpha: float = 0.25, gamma: float = 1.5, aux: bool = True) -> None:
        super().__init__()
        self.gains = (class_gain, l1_gain, giou_gain)
        self.matcher = HungarianMatcher(class_cost=class_cost, l1_cost=l1_cost, giou_cost=giou_cost)
        self.alpha, self.gamma, self.aux = alpha, gamma, aux

    def layer_terms(self, pred_boxes: torch.Tensor, pred_logits: torch.Tensor, gt_boxes: torch.Tensor,
                    gt_labels: torch.Tensor, matches: Matches) -> torch.Tensor:
        """The unweighted (class, L1, GIoU) terms of each of K layers, (K, 3) with gradients, for predictions
        (K, B, Q, 4) cxcywh and logits (K, B, Q, nc), padded targets (B, M, 4) cxcywh and labels (B, M)."""
        boxes, logits = pred_boxes.float(), pred_logits.float()
        k = logits.shape[0]
        n = matches.per_layer
        norm = float(max(n, 1))
        layer, image, query, target = matches.layer, matches.image, matches.query, matches.target
        pred = boxes[layer, image, query]  # (P, 4)
        gt = gt_boxes[image, target].to(pred.dtype)  # (P, 4)
        label = gt_labels[image, target]  # (P,)
        iou, giou = box_iou_giou(pred, gt)  # (P,)
        keep_graph = boxes[..., :0].sum((1, 2, 3))  # (K,) zeros that keep every layer in the graph
        l1 = keep_graph.index_add(0, layer, (pred - gt).abs().sum(-1)) / norm
        giou_term = keep_graph.index_add(0, layer, 1 - giou) / norm

        # varifocal: target IoU in the matched class, weight IoU there and alpha * p^gamma elsewhere
        score = torch.zeros_like(logits)  # (K, B, Q, nc)
        score[layer, image, query, label] = iou.detach()
        positive = torch.zeros_like(logits, dtype=torch.bool)
        positive[layer, image, query, label] = True
        neg_alpha = self.alpha if n else 1 - self.alpha  # no pair at all: ultralytics' focal loss instead
        weight = torch.where(positive, score, neg_alpha * logits.sigmoid().pow(self.gamma))
        bce = F.binary_cross_entropy_with_logits(logits, score, reduction="none")
        cls = (bce * weight).sum((1, 2, 3)) / norm  # (K,)
        return torch.stack((cls, l1, giou_term), 1)

    @staticmethod
    def denoising_matches(dn_meta: dict[str, Any], counts: Sequence[int], layers: int,
                          device: torch.device) -> Matches:
        """The fixed pairs of the denoising queries, repeated over ``layers``: image i's queries
        ``dn_pos_idx[i]`` reconstruct its targets ``dn_gt_idx[i]`` (indices into the batch's concatenated
        targets; without that key, all of the image's targets) once per group (``dn_num_group``)."""
        pos_idx, groups = dn_meta["dn_pos_idx"], int(dn_meta["dn_num_group"])
        if len(pos_idx) != len(counts):
            raise DataError(f"dn_meta['dn_pos_idx'] has {len(pos_idx)} entries for {len(counts)} images; pass the "
                            f"dn_meta the decoder made for this batch")
        gt_idx = dn_meta.get("dn_gt_idx")
        offset = 0
        images, queries, targets = [], [], []
        for i, n in enumerate(counts):  # per image: its queries and the local index of what they reconstruct
            local = (torch.as_tensor(gt_idx[i], dtype=torch.long) - offset if gt_idx is not None
                     else torch.arange(n, dtype=torch.long)).repeat(groups)
            offset += n
            q = torch.as_tensor(pos_idx[i], dtype=torch.long).view(-1)
            if len(local) and (int(local.min()) < 0 or int(local.max()) >= n):
                raise DataError(f"dn_meta['dn_gt_idx'][{i}] names targets outside image {i}'s {n}; pass the dn_meta "
                                f"the decoder made for this batch")
            if len(q) != len(local):
                raise DataError(f"dn_meta['dn_pos_idx'][{i}] has {len(q)} queries for {len(local)} denoised targets "
                                f"x groups; pass the dn_meta the decoder made for this batch")
            images.append(torch.full_like(q, i))
            queries.append(q)
            targets.append(local)
        image, query, target = (torch.cat(x).to(device) if x else torch.zeros(0, dtype=torch.long, device=device)
                                for x in (images, queries, targets))
        p = len(query)
        layer = torch.arange(layers, device=device).repeat_interleave(p)  # (layers * P,)
        return Matches(layer, image.repeat(layers), query.repeat(layers), target.repeat(layers), per_layer=p)

    def network_inputs(self, images: torch.Tensor, batch: Mapping[str, Any]) -> tuple[Any, ...]:
        """The images and the denoising targets the decoder makes its denoising queries from (the batch's
        boxes; torch's random stream, which a resumed run restores)."""
        return images, detr_targets(batch["boxes"], batch["labels"], images.shape[-2:], device=images.device)

    def batch_loss(self, preds: Any, batch: Mapping[str, Any]) -> DETRLossParts:
        """The loss of the decoder's training output on ``batch`` (the input size from its images)."""
        return self(preds, batch["boxes"], batch["labels"], input_size=batch["images"].shape[-2:])

    def forward(self, preds: Sequence[Any], boxes: Sequence[torch.Tensor], labels: Sequence[torch.Tensor], *,
                input_size: Sequence[int]) -> DETRLossParts:
        """The decoder's training output, per-image ground truth (xyxy pixels) and the input's (H, W)
        -> the loss and its parts."""
        if len(preds) != 5:
            raise ConfigError(f"RTDETRLoss takes the decoder's training output (dec_bboxes, dec_scores, enc_bboxes, "
                              f"enc_scores, dn_meta), got {len(preds)} items; call the decoder in training mode")
        dec_boxes, dec_logits, enc_boxes, enc_logits, dn_meta = preds
        if dec_boxes.dim() != 4 or dec_logits.dim() != 4 or dec_boxes.shape[-1] != 4:
            raise ConfigError(f"RTDETRLoss takes dec_bboxes (L, B, Q, 4) and dec_scores (L, B, Q, nc), got "
                              f"{tuple(dec_boxes.shape)} and {tuple(dec_logits.shape)}; pass the decoder's "
                              f"training output")
        num_layers, b, _, nc = dec_logits.shape
        if len(boxes) != b or len(labels) != b:
            raise DataError(f"the loss got {b} images but {len(boxes)} box lists and {len(labels)} label lists")
        h, w = (float(s) for s in input_size)
        device = dec_logits.device
        gt_xyxy, gt_labels, gt_mask = pad_targets(boxes, labels, device)  # (B, M, 4), (B, M), (B, M)
        if gt_mask.any() and int(gt_labels[gt_mask].max()) >= nc:
            raise DataError(f"a target has class index {int(gt_labels[gt_mask].max())} but the decoder predicts {nc} "
                            f"classes; check the data's names against the model's num_classes")
        gt_boxes = _xyxy_to_cxcywh(gt_xyxy, h, w)
        counts = [int(c) for c in gt_mask.sum(1).tolist()]

        if dn_meta is not None:  # the denoising queries come first
            dn_boxes, dec_boxes = torch.split(dec_boxes, dn_meta["dn_num_split"], dim=2)
            dn_logits, dec_logits = torch.split(dec_logits, dn_meta["dn_num_split"], dim=2)
        all_boxes = torch.cat((enc_boxes.unsqueeze(0), dec_boxes))  # (L + 1, B, Q, 4): encoder first
        all_logits = torch.cat((enc_logits.unsqueeze(0), dec_logits))  # (L + 1, B, Q, nc)
        if not self.aux:
            all_boxes, all_logits = all_boxes[-1:], all_logits[-1:]
        gains = all_logits.new_tensor(self.gains)  # (3,)
        matches = self.matcher(all_boxes, all_logits, gt_boxes, gt_labels, counts)
        terms = self.layer_terms(all_boxes, all_logits, gt_boxes, gt_labels, matches)  # (K, 3) unweighted
        main, aux = terms[-1], (terms[:-1] * gains).sum(0)  # (3,) each
        dn_main = dn_aux = main.new_zeros(3)
        if dn_meta is not None:
            if not self.aux:
                dn_boxes, dn_logits = dn_boxes[-1:], dn_logits[-1:]
            dn_matches = self.denoising_matches(dn_meta, counts, dn_logits.shape[0], device)
            dn_terms = self.layer_terms(dn_boxes, dn_logits, gt_boxes, gt_labels, dn_matches) * gains  # (L, 3)
            dn_main, dn_aux = dn_terms[-1], dn_terms[:-1].sum(0)
        weighted = main * gains
        total = weighted.sum() + aux.sum() + dn_main.sum() + dn_aux.sum()
        named: dict[str, torch.Tensor] = {}
        for suffix, values in (("", weighted), ("_aux", aux), ("_dn", dn_main), ("_aux_dn", dn_aux)):
            names = ("loss_class", "loss_bbox", "loss_giou")
            named.update({name + suffix: v for name, v in zip(names, values.detach())})
        cls, l1, giou = main.detach()
        return DETRLossParts(total, cls, l1, giou, aux.detach().sum(), (dn_main + dn_aux).detach().sum(), named)
