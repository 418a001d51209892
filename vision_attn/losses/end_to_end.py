"""The loss of an end-to-end (NMS-free) head: one-to-many and one-to-one branches trained together.

An end-to-end head (YOLOv10's ``v10Detect``, YOLO26's ``end2end: True`` ``Detect``) has two copies of
its box and class branches. The one-to-many branch is trained like YOLOv8 (the top-10 aligned anchors
of each box are positives) and gives rich gradients to the backbone; the one-to-one branch, which
reads detached features and is the one that predicts, is trained to put a single positive on each box
(top-7 candidates, then the best one: ultralytics' ``tal_topk2``), so its detections need no NMS.

``total = w_o2m * L_o2m + w_o2o * L_o2o`` with both terms :class:`~vision_attn.losses.DetectionLoss`
on the same ground truth. :class:`BranchWeights` gives the weights per epoch: YOLO26's (ultralytics
8.4.190 ``E2ELoss``, which its trainer also uses for YOLOv10) starts at ``w_o2m = 0.8`` and decays
linearly to 0.1 at the last epoch, ``w_o2o = 1 - w_o2m``; YOLOv10's paper loss (ultralytics'
``E2EDetectLoss``) weighs both 1 and takes a single positive in the one-to-one branch from the start.

The epoch the weights are at (and the epochs of the run) are the module's state: ``get_extra_state``
puts them in its ``state_dict`` (so in a training checkpoint), and a resumed run starts from them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.losses.batch import BatchLoss
from vision_attn.losses.detection import DetectionLoss

__all__ = ["BranchWeights", "EndToEndLoss", "YOLO26_WEIGHTS", "YOLOV10_WEIGHTS"]


@dataclass(frozen=True)
class BranchWeights:
    """The one-to-many weight falls linearly from ``start`` (first epoch) to ``end`` (last epoch); the
    one-to-one weight is ``total`` minus it (never below 0). ``o2o_topk``/``o2o_topk2``: the one-to-one
    branch's candidates per box and the positives it keeps of them."""

    start: float = 0.8
    end: float = 0.1
    total: float = 1.0
    o2o_topk: int = 7
    o2o_topk2: int = 1

    def at(self, epoch: int, epochs: int) -> tuple[float, float]:
        """(one-to-many, one-to-one) weights during ``epoch`` (0-based) of ``epochs``."""
        o2m = max(1 - epoch / max(epochs - 1, 1), 0.0) * (self.start - self.end) + self.end
        return o2m, max(self.total - o2m, 0.0)


YOLO26_WEIGHTS = BranchWeights()  # ultralytics 8.4.190 E2ELoss (YOLO26, and YOLOv10 in its trainer)
YOLOV10_WEIGHTS = BranchWeights(start=1.0, end=1.0, total=2.0, o2o_topk=1, o2o_topk2=1)  # E2EDetectLoss
WEIGHTS = {"yolo26": YOLO26_WEIGHTS, "yolov10": YOLOV10_WEIGHTS}


class EndToEndLoss(BatchLoss, nn.Module):
    """Dual-assignment loss of an end-to-end head.

    Args:
        model: the detector (its last row an end-to-end head) or the head itself.
        weights: :class:`BranchWeights`, or ``"yolo26"`` / ``"yolov10"``.
        box_gain, cls_gain, dfl_gain, alpha, beta: as :class:`DetectionLoss`, for both branches.
        o2m_topk: positives per box of the one-to-many branch.
        loss: the loss of each branch (:class:`DetectionLoss`, or a subclass such as
            :class:`~vision_attn.losses.SegmentationLoss`, whose extra targets (masks) follow the labels),
            built with ``loss_kwargs`` besides the gains.

    Input: the head's training output, ``{"one2many": maps, "one2one": maps}`` with each what the branch
    loss takes (a list of (B, 4*reg_max + nc, H_i, W_i) maps for detection). Output: the branch loss's
    parts (:class:`~vision_attn.losses.LossParts`) whose ``total`` is the weighted sum
    and whose parts are the one-to-one branch's (the branch that predicts, as ultralytics' ``E2ELoss`` logs).
    """

    sum_over_images: ClassVar[bool] = True
    """As its branch losses: a mean per image, multiplied by the batch size in training."""

    def __init__(self, model: nn.Module, *, weights: BranchWeights | str = YOLO26_WEIGHTS, box_gain: float = 7.5,
                 cls_gain: float = 0.5, dfl_gain: float = 1.5, o2m_topk: int = 10, alpha: float = 0.5,
                 beta: float = 6.0, loss: type[DetectionLoss] = DetectionLoss, **loss_kwargs: Any) -> None:
        super().__init__()
        if isinstance(weights, str):
            if weights not in WEIGHTS:
                raise ConfigError(f"end-to-end loss weights {weights!r}: choose one of {sorted(WEIGHTS)}")
            weights = WEIGHTS[weights]
        self.weights = weights
        gains = dict(box_gain=box_gain, cls_gain=cls_gain, dfl_gain=dfl_gain, alpha=alpha, beta=beta, **loss_kwargs)
        self.one_to_many = loss(model, topk=o2m_topk, **gains)
        self.one_to_one = loss(model, topk=weights.o2o_topk, topk2=weights.o2o_topk2, **gains)
        self.nc, self.reg_max = self.one_to_one.nc, self.one_to_one.reg_max
        self.batch_keys = self.one_to_one.batch_keys  # the branch loss's targets (masks for segmentation)
        self.epoch, self.epochs = 0, 1

    def set_epoch(self, epoch: int, epochs: int) -> None:
        """Move the branch weights to ``epoch`` (0-based) of a run of ``epochs``."""
        if epochs < 1 or epoch < 0:
            raise ValueError(f"epoch={epoch}, epochs={epochs}: give epoch >= 0 and epochs >= 1")
        self.epoch, self.epochs = int(epoch), int(epochs)

    def start_epoch(self, epoch: int, epochs: int) -> dict[str, float]:
        """Move the branch weights to ``epoch``; log the one-to-many branch's weight (``o2m_weight``)."""
        self.set_epoch(epoch, epochs)
        return {"o2m_weight": self.branch_weights[0]}

    @property
    def branch_weights(self) -> tuple[float, float]:
        """(one-to-many, one-to-one) weights at the current epoch."""
        return self.weights.at(self.epoch, self.epochs)

    def get_extra_state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "epochs": self.epochs}

    def set_extra_state(self, state: Any) -> None:
        if not isinstance(state, Mapping) or not {"epoch", "epochs"} <= set(state):
            raise ConfigError(f"the end-to-end loss state in this checkpoint is {state!r}; expected "
                              "{'epoch': int, 'epochs': int}")
        self.set_epoch(int(state["epoch"]), int(state["epochs"]))

    def forward(self, preds: Mapping[str, Any], boxes: Sequence[torch.Tensor], labels: Sequence[torch.Tensor],
                *more: Sequence[torch.Tensor]) -> Any:
        if not isinstance(preds, Mapping) or not {"one2many", "one2one"} <= set(preds):
            raise ConfigError("the end-to-end loss needs the head's training output with 'one2many' and 'one2one' "
                              "branches; this head has no one-to-one branch (train it with the YOLOv8 loss)")
        o2m, o2o = self.branch_weights
        many = self.one_to_many(preds["one2many"], boxes, labels, *more)
        one = self.one_to_one(preds["one2one"], boxes, labels, *more)
        return dataclasses.replace(one, total=o2m * many.total + o2o * one.total)
