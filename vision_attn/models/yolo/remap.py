"""Moving a detector's weights through an edit of its rows: ``model.{old}.`` keys become
``model.{new}.``, so everything but the inserted blocks loads into the edited model."""
from __future__ import annotations

import re
from typing import Iterable, Mapping

import torch

__all__ = ["insertion_map", "remap_state_dict"]

_KEY = re.compile(r"^(model\.)(\d+)(\..*)$")


def insertion_map(num_old_rows: int, inserted: Iterable[int]) -> dict[int, int]:
    """Old row index -> new index when rows were inserted at the new indices ``inserted``."""
    taken = set(inserted)
    mapping, new = {}, 0
    for old in range(num_old_rows):
        while new in taken:
            new += 1
        mapping[old] = new
        new += 1
    return mapping


def remap_state_dict(state: Mapping[str, torch.Tensor], mapping: Mapping[int, int]) -> dict[str, torch.Tensor]:
    """Rename ``model.{i}.…`` keys to ``model.{mapping[i]}.…`` (rows without a new index are dropped;
    keys outside ``model.N`` are kept)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        m = _KEY.match(key)
        if m is None:
            out[key] = value
        elif int(m.group(2)) in mapping:
            out[f"{m.group(1)}{mapping[int(m.group(2))]}{m.group(3)}"] = value
    return out
