"""The YOLOv8 instance-segmentation loss: the detection loss plus a mask term (ultralytics'
``v8SegmentationLoss``).

Each positive anchor's mask is its coefficients times the prototypes, ``coeffs @ protos`` (logits at
the prototypes' resolution, a quarter of the input's side); the term is the binary cross-entropy
against the mask of the instance the anchor was assigned to, summed inside that instance's box only
(the box in mask pixels), averaged over the mask's pixels and divided by the box's area (as a fraction
of the image, so that small objects weigh as much as large ones), then averaged over the positive
anchors. Target masks come per instance at any resolution; where it differs from the prototypes'
(``mask_ratio`` other than 4), the prototypes are resized to it (bilinear), as ultralytics does.

``total = box_gain * box + mask_gain * seg + cls_gain * cls + dfl_gain * dfl``; ultralytics weighs the
mask term with the box gain (7.5). Like :class:`~vision_attn.losses.DetectionLoss`, the total is per
image (the detection task multiplies it by the batch size, YOLOv8's convention).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import ConfigError, DataError
from vision_attn.losses.detection import DetectionLoss
from vision_attn.models.yolo.masks import crop_to_boxes

__all__ = ["SegmentationLoss", "SegmentationParts"]


@dataclass
class SegmentationParts:
    """``total`` (with gradients) and the unweighted parts (detached): ``box`` (CIoU), ``seg`` (mask BCE),
    ``cls`` (BCE), ``dfl`` (distribution focal loss, or the L1 term of a ``reg_max`` 1 head)."""

    total: torch.Tensor
    box: torch.Tensor
    seg: torch.Tensor
    cls: torch.Tensor
    dfl: torch.Tensor


class SegmentationLoss(DetectionLoss):
    """The segmentation loss of a model whose last row is a ``Segment`` head.

    Args: those of :class:`~vision_attn.losses.DetectionLoss`, and ``mask_gain`` (the mask term's weight;
    ultralytics uses the box gain, 7.5).

    Input: the head's training output ``{"feats": [maps], "coeffs": (B, nm, A), "protos": (B, nm, Hp, Wp)}``
    (``semantic`` logits, where a YOLO26 head gives them, are not used), and per image ``boxes`` (n_i, 4)
    xyxy input pixels, ``labels`` (n_i,) and ``masks`` (n_i, Hm, Wm) binary, one per box.
    """

    batch_keys = ("boxes", "labels", "masks")

    def __init__(self, model: nn.Module, *, mask_gain: float = 7.5, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.mask_gain = mask_gain

    def forward(self, preds: Mapping[str, Any], boxes: Sequence[torch.Tensor], labels: Sequence[torch.Tensor],
                masks: Sequence[torch.Tensor]) -> SegmentationParts:
        if not isinstance(preds, Mapping) or not {"feats", "coeffs", "protos"} <= set(preds):
            raise ConfigError("the segmentation loss needs a Segment head's training output (feats, coeffs, protos); "
                              "this model's head is not a Segment head (train it with train det)")
        if len(masks) != len(boxes):
            raise DataError(f"the loss got {len(boxes)} box lists but {len(masks)} mask lists")
        for i, (m, b) in enumerate(zip(masks, boxes)):
            if len(m) != len(b):
                raise DataError(f"image {i} of the batch has {len(b)} boxes but {len(m)} masks; each box needs its mask")
        assigned = self.assign(preds["feats"], boxes, labels)
        box, cls, dfl = self.detection_terms(assigned)
        seg = self.mask_term(assigned, preds["coeffs"].float(), preds["protos"].float(), masks)
        g_box, g_cls, g_dfl = self.gains
        total = g_box * box + self.mask_gain * seg + g_cls * cls + g_dfl * dfl
        return SegmentationParts(total, box.detach(), seg.detach(), cls.detach(), dfl.detach())

    def mask_term(self, assigned: Any, coeffs: torch.Tensor, protos: torch.Tensor,
                  masks: Sequence[torch.Tensor]) -> torch.Tensor:
        """The mask BCE of the positive anchors, each cropped to its box and divided by the box's area."""
        targets = assigned.targets
        fg = targets.foreground  # (B, A)
        n_fg = fg.sum()
        if not bool(fg.any()):  # keep the graph (DDP needs every parameter used)
            return (protos * 0).sum() + (coeffs * 0).sum()
        mask_hw = next((tuple(m.shape[-2:]) for m in masks if m.ndim == 3), tuple(protos.shape[-2:]))
        if mask_hw != tuple(protos.shape[-2:]):
            protos = F.interpolate(protos, mask_hw, mode="bilinear", align_corners=False)
        mh, mw = mask_hw
        h, w = assigned.input_size
        norm = targets.boxes / targets.boxes.new_tensor([w, h, w, h])  # (B, A, 4) boxes as image fractions
        area = (norm[..., 2] - norm[..., 0]) * (norm[..., 3] - norm[..., 1])  # (B, A)
        in_mask = norm * norm.new_tensor([mw, mh, mw, mh])
        loss = coeffs.new_zeros(())
        for i in range(len(masks)):  # one image at a time: each has its own instances
            fg_i = fg[i]
            if not bool(fg_i.any()):
                continue
            gt = masks[i].to(protos.device).float()[targets.gt_index[i][fg_i]]  # (P_i, Hm, Wm)
            logits = torch.einsum("pn,nhw->phw", coeffs[i][:, fg_i].T, protos[i])  # (P_i, Hm, Wm)
            bce = F.binary_cross_entropy_with_logits(logits, gt, reduction="none")
            loss = loss + (crop_to_boxes(bce, in_mask[i][fg_i]).mean(dim=(1, 2)) / area[i][fg_i]).sum()
        return loss / n_fg
