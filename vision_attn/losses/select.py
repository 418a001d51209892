"""The loss of a YAML network, chosen by its head (the one place that knows which family takes which
loss): YOLOv8's :class:`DetectionLoss` for a Detect head, :class:`SegmentationLoss` for a Segment head,
either inside :class:`EndToEndLoss` for a head with a one-to-one branch, and :class:`RTDETRLoss` for an
RT-DETR decoder. Each is a :class:`~vision_attn.losses.batch.BatchLoss`."""
from __future__ import annotations

from typing import Any, Sequence

from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.losses.batch import BatchLoss
from vision_attn.losses.detection import DetectionLoss
from vision_attn.losses.detr import RTDETRLoss
from vision_attn.losses.end_to_end import EndToEndLoss
from vision_attn.losses.keypoints import PoseLoss
from vision_attn.losses.obb import OBBLoss
from vision_attn.losses.rle import Pose26Loss
from vision_attn.losses.segmentation import SegmentationLoss
from vision_attn.models.yolo.pose import Pose26

__all__ = ["detector_loss", "LOSS_OF_HEAD"]

LOSS_OF_HEAD: dict[str, type[BatchLoss]] = {"detect": DetectionLoss, "segment": SegmentationLoss,
                                            "obb": OBBLoss, "pose": PoseLoss, "rtdetr": RTDETRLoss}
"""A YAML network's ``task`` (what its last row is) -> its loss class."""


def detector_loss(model: nn.Module, *, e2e_weights: str = "yolo26", box_gain: float = 7.5, cls_gain: float = 0.5,
                  dfl_gain: float = 1.5, mask_gain: float | None = None, angle_gain: float = 1.0,
                  pose_gain: float = 12.0, kobj_gain: float = 1.0, rle_gain: float = 1.0,
                  kpt_sigmas: Sequence[float] | None = None) -> BatchLoss:
    """The loss of ``model`` (a network built from a YAML): the gains of the YOLO losses (``mask_gain`` of a
    segmentation head; None: ``box_gain``, as ultralytics; ``angle_gain`` of an oriented-box head; ``pose_gain``,
    ``kobj_gain``, ``rle_gain`` (YOLO26's) and the data set's OKS sigmas ``kpt_sigmas`` of a keypoint head), ``e2e_weights`` the branch weights of an
    end-to-end head; an RT-DETR decoder's loss has its own (class 1, L1 5, GIoU 2)."""
    task = getattr(model, "task", None)
    if task not in LOSS_OF_HEAD:
        raise ConfigError(f"a {task} network has no training loss here; give a detector or segmentation YAML "
                          f"(its last row one of {', '.join(sorted(LOSS_OF_HEAD))} heads)")
    loss = LOSS_OF_HEAD[task]
    if loss is RTDETRLoss:
        return RTDETRLoss()
    gains: dict[str, Any] = dict(box_gain=box_gain, cls_gain=cls_gain, dfl_gain=dfl_gain)
    if loss is SegmentationLoss:
        gains["mask_gain"] = mask_gain if mask_gain is not None else box_gain
    if loss is OBBLoss:
        gains["angle_gain"] = angle_gain
    if loss is PoseLoss:
        gains.update(pose_gain=pose_gain, kobj_gain=kobj_gain, sigmas=kpt_sigmas)
        if isinstance(model.model[-1], Pose26):  # YOLO26's keypoint loss: keypoint-aware assignment, RLE term
            loss = Pose26Loss
            gains["rle_gain"] = rle_gain
    if model.model[-1].has_one2one:
        return EndToEndLoss(model, weights=e2e_weights, loss=loss, **gains)
    return loss(model, **gains)
