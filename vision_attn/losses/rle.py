"""YOLO26's keypoint loss (ultralytics' ``PoseLoss26``): :class:`~vision_attn.losses.PoseLoss` with the
keypoint-aware assignment and a residual log-likelihood term.

Differences from the YOLOv8 keypoint loss:

- keypoints decode as ``k + centre`` (the ``Pose26`` head's);
- anchors are assigned by :class:`~vision_attn.losses.keypoint_assigner.KeypointTaskAlignedAssigner`
  (keypoint similarity as the overlap, a pyramid-level gate);
- a residual log-likelihood estimation term (RLE; Li et al., 2021): for each labelled keypoint the head's
  training-only scales give ``sigma = sigmoid(s)`` per coordinate, the error ``e = (pred - target) / sigma``
  goes through the head's flow (:class:`~vision_attn.models.yolo.realnvp.RealNVP`), and the term is
  ``sum(log sigma - log p(e) + log(2 sigma) + |e|)`` weighted per keypoint (:data:`RLE_WEIGHTS` for COCO's
  17: elbows and knees 1.2, wrists and ankles 1.5, the rest 1; else 1), over the labelled keypoints' count,
  clamped at 0. Errors are clamped to [-100, 100]; a non-finite one is left out.

``total = 7.5 box + 12 pose + 1 kobj + 0.5 cls + 1.5 dfl + 1 rle`` by default, per image.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError, DataError
from vision_attn.losses.keypoint_assigner import KeypointTaskAlignedAssigner
from vision_attn.losses.keypoints import PoseLoss, PoseParts, pad_keypoints
from vision_attn.models.yolo.detect import make_anchors

__all__ = ["Pose26Loss", "Pose26Parts", "RLE_WEIGHTS", "rle_term"]

RLE_WEIGHTS = (1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.2, 1.2, 1.5, 1.5, 1.0, 1.0, 1.2, 1.2, 1.5, 1.5)
"""YOLO26's weights of COCO's 17 keypoints in the RLE term."""


@dataclass
class Pose26Parts(PoseParts):
    """The parts of :class:`~vision_attn.losses.PoseParts` and ``rle`` (detached)."""

    rle: torch.Tensor = field(default_factory=lambda: torch.zeros(()))


def rle_term(flow: nn.Module, pred: torch.Tensor, sigma_logits: torch.Tensor, target: torch.Tensor,
             weights: torch.Tensor) -> torch.Tensor:
    """The RLE term of N labelled keypoints: predicted and target x, y (N, 2), scale logits (N, 2), weights
    (N,); ``flow.log_prob`` gives the log-density of the normalised errors."""
    zero = pred.sum() * 0 + sum(p.sum() * 0 for p in flow.parameters())
    if pred.shape[0] == 0:
        return zero
    sigma = sigma_logits.float().sigmoid().clamp_min(torch.finfo(torch.float32).tiny)
    error = (pred - target) / (sigma + 1e-9)
    finite = torch.isfinite(error).all(-1)
    if not bool(finite.any()):
        return zero
    error, sigma, weights = error[finite].clamp(-100, 100), sigma[finite], weights[finite]
    log_phi = flow.log_prob(error)
    loss = (torch.log(sigma) - log_phi.unsqueeze(1) + torch.log(sigma * 2) + error.abs()) * weights.unsqueeze(1)
    return (loss / len(loss)).sum()


class Pose26Loss(PoseLoss):
    """The loss of a model whose last row is a ``Pose26`` head (inside
    :class:`~vision_attn.losses.EndToEndLoss` for its two branches).

    Args: those of :class:`~vision_attn.losses.PoseLoss`, ``rle_gain`` and ``rle_weights`` (K per-keypoint
    weights; default :data:`RLE_WEIGHTS` for (17, 3), else 1).

    Input: the head's training output ``{"feats": [maps], "kpts": (B, K*D, A), "kpts_sigma": (B, 2K, A)}``
    and the batch of :class:`~vision_attn.losses.PoseLoss`.
    """

    def __init__(self, model: nn.Module, *, rle_gain: float = 1.0, rle_weights: Sequence[float] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        head = self.head[0]
        if not hasattr(head, "flow_model"):
            raise ConfigError("YOLO26's keypoint loss needs a Pose26 head (its flow and keypoint scales); use "
                              "PoseLoss for a Pose head")
        k = self.kpt_shape[0]
        weights = rle_weights if rle_weights is not None else (RLE_WEIGHTS if self.kpt_shape == (17, 3) else [1.0] * k)
        if len(weights) != k:
            raise ConfigError(f"rle_weights has {len(weights)} values; give one per keypoint ({k})")
        self.register_buffer("rle_weights", torch.tensor(weights, dtype=torch.float32), persistent=False)
        self.rle_gain = rle_gain
        a = self.assigner
        self.assigner = KeypointTaskAlignedAssigner(self.sigmas, topk=a.topk, topk2=a.topk2, alpha=a.alpha,
                                                    beta=a.beta, min_side=a.min_side)

    def forward(self, preds: Mapping[str, Any], boxes: Sequence[torch.Tensor],  # type: ignore[override]
                labels: Sequence[torch.Tensor], keypoints: Sequence[torch.Tensor]) -> Pose26Parts:
        if not isinstance(preds, Mapping) or not {"feats", "kpts", "kpts_sigma"} <= set(preds):
            raise ConfigError("YOLO26's keypoint loss needs a Pose26 head's training output (feats, kpts, "
                              "kpts_sigma)")
        if len(keypoints) != len(boxes) or any(len(kp) != len(b) for kp, b in zip(keypoints, boxes)):
            raise DataError("the batch's keypoint sets do not match its boxes one to one; each box needs its "
                            "keypoints")
        feats = preds["feats"]
        gt = pad_keypoints(keypoints, self.kpt_shape[0], preds["kpts"].device)  # (B, M, K, 3) pixels
        points, strides = make_anchors(feats, self.head[0].stride)
        points, strides = points.float(), strides.float()
        pred = self.decode_keypoints(preds["kpts"], points)  # (B, A, K, D) grid units
        b, _, a = preds["kpts_sigma"].shape
        sigma = preds["kpts_sigma"].float().transpose(1, 2).reshape(b, a, self.kpt_shape[0], 2)
        assigned = self.assign(feats, boxes, labels, pred_kpts=pred.detach()[..., :2] * strides.view(1, -1, 1, 1),
                               gt_kpts=gt, anchor_strides=strides.view(-1))
        box, cls, dfl = self.detection_terms(assigned)
        pose, kobj, rle = self.keypoint_rle_terms(assigned, pred, sigma, gt)
        g_box, g_cls, g_dfl = self.gains
        total = (g_box * box + self.pose_gain * pose + self.kobj_gain * kobj + g_cls * cls + g_dfl * dfl
                 + self.rle_gain * rle)
        return Pose26Parts(total, box.detach(), pose.detach(), kobj.detach(), cls.detach(), dfl.detach(),
                           rle.detach())

    def keypoint_rle_terms(self, assigned: Any, pred: torch.Tensor, sigma: torch.Tensor, gt: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The (pose, kobj, rle) terms of the positive anchors."""
        flow = self.head[0].flow_model
        if not bool(assigned.targets.foreground.any()):
            zero = pred.sum() * 0 + sigma.sum() * 0
            return zero, zero, zero + sum(p.sum() * 0 for p in flow.parameters())
        fg, gt_kpt, labelled, area = self.matched_keypoints(assigned, gt)
        pred_kpt, sigma_kpt = pred[fg], sigma[fg]
        pose, kobj = self.location_and_visibility(pred_kpt, gt_kpt, labelled, area)
        weights = self.rle_weights.to(pred.device).expand_as(labelled)[labelled]
        rle = rle_term(flow, pred_kpt[labelled][:, :2], sigma_kpt[labelled], gt_kpt[labelled][:, :2], weights)
        return pose, kobj, rle.clamp(min=0)
