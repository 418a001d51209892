"""What an exported graph returns, by the kind of network: a classifier its logits; a detector
``boxes_scores`` (B, 4 + nc, A); a segmenter (a -seg YAML or run) two tensors, ``boxes_scores_coeffs``
(B, 4 + nc + nm, A), the detector's rows followed by each anchor's ``nm`` mask coefficients, and
``protos`` (B, nm, H/4, W/4): an instance's mask is ``sigmoid(coeffs @ protos)`` cropped to its box
(:mod:`vision_attn.models.yolo.masks`)."""
from __future__ import annotations

from typing import Literal, Sequence

import torch
from torch import nn

__all__ = ["Kind", "OUTPUTS", "graph_outputs", "kind_of", "one_or_tuple"]

Kind = Literal["classifier", "detector", "segmenter"]

OUTPUTS: dict[str, tuple[tuple[str, str], ...]] = {
    "classifier": (("logits", "(B, classes) logits"),),
    "detector": (("boxes_scores", "(B, 4 + nc, anchors): cx, cy, w, h in input pixels, then class probabilities"),),
    "segmenter": (("boxes_scores_coeffs", "(B, 4 + nc + nm, anchors): cx, cy, w, h in input pixels, class "
                   "probabilities, then nm mask coefficients"),
                  ("protos", "(B, nm, H/4, W/4) prototype masks: an instance's mask is sigmoid(coeffs @ protos), "
                   "cropped to its box")),
}
"""Each kind's graph outputs: (name, description)."""


KINDS: dict[str, Kind] = {"segment": "segmenter", "detect": "detector", "rtdetr": "detector"}
"""A YAML network's ``task`` -> its kind (any other network, e.g. a registered model: a classifier)."""


def kind_of(model: nn.Module) -> Kind:
    """What ``model`` is for export: a segmenter, a detector (a Detect or RT-DETR head) or a classifier."""
    return KINDS.get(getattr(model, "task", ""), "classifier")


def graph_outputs(model: nn.Module) -> tuple[str, ...]:
    """The output names of ``model``'s exported graph: two for a segmentation model, else one."""
    return tuple(n for n, _ in OUTPUTS[kind_of(model)])


def one_or_tuple(outputs: Sequence[torch.Tensor]) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """A runtime's outputs as the PyTorch model returns them: one tensor, or a tuple of several (a
    segmenter's rows and prototypes)."""
    return outputs[0] if len(outputs) == 1 else tuple(outputs)
