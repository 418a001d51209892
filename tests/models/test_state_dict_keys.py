"""Every registered model's state dict (keys and shapes, in order) is the one recorded in
``data/state_dict_keys.json.gz``: checkpoints saved by earlier versions keep loading. The file was
written on the meta device from commit e1ef0ac, before the CPU kernels moved into ``vision_attn.kernels``;
a model added later records its own entry."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

import vision_attn

RECORDED = json.loads(gzip.decompress((Path(__file__).parent / "data" / "state_dict_keys.json.gz").read_bytes()))


def test_every_registered_model_is_recorded():
    assert set(RECORDED) <= set(vision_attn.list_models())


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_state_dict_keys_and_shapes_are_unchanged(name):
    with torch.device("meta"):
        model = vision_attn.create_model(name)
    assert [[k, list(v.shape)] for k, v in model.state_dict().items()] == RECORDED[name]
