"""What an exported graph returns, by the kind of network: a classifier its logits; a detector
``boxes_scores`` (B, 4 + nc, A); a segmenter (a -seg YAML or run) two tensors, ``boxes_scores_coeffs``
(B, 4 + nc + nm, A), the detector's rows followed by each anchor's ``nm`` mask coefficients, and
``protos`` (B, nm, H/4, W/4): an instance's mask is ``sigmoid(coeffs @ protos)`` cropped to its box
(:mod:`vision_attn.models.yolo.masks`); a keypoint model (``keypoints``) ``boxes_scores_keypoints``
(B, 4 + nc + K * D, A), the detector's rows followed by each anchor's K points (x, y in input pixels and,
for D = 3, a visibility probability); an oriented-box model (``rotated``) ``rboxes_scores`` (B, 4 + nc + 1,
A), the rotated boxes' cx, cy, w, h, the class probabilities and the angle (radians).

A network's kind is the ``export_kind`` of the registered task that trains its head
(:func:`vision_attn.tasks.registry.task_of_network`); any other network is a classifier."""
from __future__ import annotations

from typing import Literal, Sequence

import torch
from torch import nn

from vision_attn.tasks.registry import task_of_network

__all__ = ["Kind", "OUTPUTS", "WITH_NMS", "CHANNELS", "graph_outputs", "kind_of", "one_or_tuple"]

Kind = Literal["classifier", "detector", "segmenter", "keypoints", "rotated"]

OUTPUTS: dict[str, tuple[tuple[str, str], ...]] = {
    "classifier": (("logits", "(B, classes) logits"),),
    "detector": (("boxes_scores", "(B, 4 + nc, anchors): cx, cy, w, h in input pixels, then class probabilities"),),
    "segmenter": (("boxes_scores_coeffs", "(B, 4 + nc + nm, anchors): cx, cy, w, h in input pixels, class "
                   "probabilities, then nm mask coefficients"),
                  ("protos", "(B, nm, H/4, W/4) prototype masks: an instance's mask is sigmoid(coeffs @ protos), "
                   "cropped to its box")),
    "keypoints": (("boxes_scores_keypoints", "(B, 4 + nc + K * D, anchors): cx, cy, w, h in input pixels, class "
                   "probabilities, then K keypoints (x, y in input pixels, and a visibility probability for D = 3)"),),
    "rotated": (("rboxes_scores", "(B, 4 + nc + 1, anchors): rotated cx, cy, w, h in input pixels, class "
                 "probabilities, then the angle in radians"),),
}
"""Each kind's graph outputs: (name, description)."""


WITH_NMS: tuple[Kind, ...] = ("detector", "segmenter")
"""The kinds ``export --nms`` can end with an NMS (their rows are boxes and class scores, and masks)."""

CHANNELS: dict[str, tuple[tuple[str, int | None], ...]] = {
    "keypoints": (("boxes", 4), ("scores", -1), ("keypoints", None)),
    "rotated": (("boxes", 4), ("scores", -1), ("angle", None)),
}
"""The quantities of a one-tensor kind's rows (B, C, A) compared one by one by ``--verify``, in order, with
their channel counts (-1: the classes, None: the rest); a kind not here: boxes (4) then scores."""


def kind_of(model: nn.Module) -> Kind:
    """What ``model`` is for export: the ``export_kind`` of the registered task that trains its head, else a
    classifier."""
    task = task_of_network(model)
    return task.export_kind if task is not None else "classifier"  # type: ignore[return-value]


def graph_outputs(model: nn.Module) -> tuple[str, ...]:
    """The output names of ``model``'s exported graph: two for a segmenter, else one."""
    return tuple(n for n, _ in OUTPUTS[kind_of(model)])


def one_or_tuple(outputs: Sequence[torch.Tensor]) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """A runtime's outputs as the PyTorch model returns them: one tensor, or a tuple of several (a
    segmenter's rows and prototypes)."""
    return outputs[0] if len(outputs) == 1 else tuple(outputs)
