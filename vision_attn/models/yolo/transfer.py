"""Carrying a detector's weights through an edit of its YAML: the state dict of the original model,
its rows renumbered as the edit moved them, checked against the edited model (built on the meta
device: no memory, no arithmetic). What ``vision-attn yaml insert|remove --checkpoint`` writes."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

import torch

from vision_attn.io.state_dict import StateDict, read_state_dict
from vision_attn.models.yolo.builder import build_detector
from vision_attn.models.yolo.remap import remap_state_dict

__all__ = ["TransferredWeights", "detector_state", "transfer_weights", "transfer_checkpoint"]


@dataclass
class TransferredWeights:
    """The remapped state dict, the keys of the edited model it fills (``transferred``), the edited
    model's keys it leaves to training (``new_keys``) and the original's tensor count."""

    state: StateDict
    transferred: list[str]
    new_keys: list[str]
    total: int


def detector_state(state: Mapping[str, torch.Tensor]) -> StateDict:
    """``state`` with a detector's own key names (``model.N.…``): a reader that took a ``model.``
    wrapper off every key (:func:`vision_attn.io.state_dict.read_state_dict` does) gets it back."""
    if state and not any(k.startswith("model.") for k in state) and all(k.split(".", 1)[0].isdigit() for k in state):
        return {f"model.{k}": v for k, v in state.items()}
    return dict(state)


def transfer_weights(state: Mapping[str, torch.Tensor], edited_yaml: str, index_map: Mapping[int, int], *,
                     scale: str | None = None) -> TransferredWeights:
    """``state`` (of the model before the edit) renumbered by ``index_map`` (old row -> new row) for the
    detector ``edited_yaml`` (its text or file) at ``scale``."""
    new_state = remap_state_dict(detector_state(state), index_map)
    with torch.device("meta"):
        expected = build_detector(edited_yaml, scale=scale).state_dict()
    return TransferredWeights(new_state, [k for k in new_state if k in expected],
                              [k for k in expected if k not in new_state], len(state))


def transfer_checkpoint(path: str | os.PathLike, edited_yaml: str, index_map: Mapping[int, int], *,
                        scale: str | None = None) -> TransferredWeights:
    """:func:`transfer_weights` of the state dict in the file ``path`` (any supported format)."""
    return transfer_weights(read_state_dict(path), edited_yaml, index_map, scale=scale)
