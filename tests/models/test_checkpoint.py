"""Checkpoint files: bad input gives a clear CheckpointError; trainer containers and prefixes load."""
from __future__ import annotations

import argparse
import os
import pickle
import re
import warnings
from pathlib import Path

import pytest
import torch
import torchvision

import vision_attn
from vision_attn import CheckpointError
from vision_attn.io.atomic import save_torch as save_atomic
from vision_attn.models.checkpoint import read_state_dict

TINY = dict(depth=1, img_size=32)  # vit_tiny with one block at a 2x2 grid


def tiny(**kwargs):
    return vision_attn.create_model("vit_tiny_patch16_224", **{**TINY, **kwargs})


@pytest.fixture
def tiny_state():
    return tiny().state_dict()


# ------------------------------------------------------------------------------------ unreadable files
def test_random_bytes_pth(tmp_path):
    path = tmp_path / "x.pth"
    path.write_bytes(os.urandom(4096))
    with pytest.raises(CheckpointError, match=re.escape(str(path))) as info:
        vision_attn.create_model("vit_tiny_patch16_224", pretrained=path, **TINY)
    assert "weights_only=False" not in str(info.value)  # never advise the unsafe load


def test_truncated_pth(tmp_path, tiny_state):
    full = tmp_path / "full.pth"
    torch.save(tiny_state, full)
    data = full.read_bytes()
    path = tmp_path / "truncated.pth"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=re.escape(str(path))) as info:
        read_state_dict(path)
    assert "truncated" in str(info.value) or "corrupt" in str(info.value)


def test_garbage_safetensors(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all" + os.urandom(64))
    with pytest.raises(CheckpointError, match=re.escape(str(path))):
        vision_attn.create_model("vit_tiny_patch16_224", pretrained=path, **TINY)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.pth"
    with pytest.raises(CheckpointError, match="no such checkpoint file"):
        read_state_dict(path)


def test_dict_without_tensors(tmp_path):
    path = tmp_path / "meta.pth"
    torch.save({"epoch": 3, "arch": "vit"}, path)
    with pytest.raises(CheckpointError, match="without tensors"):
        read_state_dict(path)


# ------------------------------------------------------------------------------------ wrong architecture
def test_resnet_checkpoint_into_vit_names_keys(tmp_path):
    path = tmp_path / "resnet18.pth"
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused outright: no warning about the head first
        with pytest.raises(CheckpointError) as info:
            vision_attn.create_model("vit_tiny_patch16_224", pretrained=path, **TINY)
    message = str(info.value)
    assert str(path) in message
    assert "conv1.weight" in message and "not in the model" in message
    assert "patch_embed.proj.weight" in message and "missing from the file" in message
    assert "more" in message  # the long lists are cut, with a count


def test_vit_small_into_vit_tiny_names_shape_mismatch(tmp_path):
    path = tmp_path / "small.pth"
    torch.save(vision_attn.create_model("vit_small_patch16_224", **TINY).state_dict(), path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(CheckpointError, match="shape mismatch") as info:
            vision_attn.create_model("vit_tiny_patch16_224", pretrained=path, **TINY)
    assert "cls_token: file (1, 1, 384) vs model (1, 1, 192)" in str(info.value)


def test_torchvision_pre_logits_refused(tmp_path):
    tv = torchvision.models.vision_transformer.VisionTransformer(
        image_size=32, patch_size=16, num_layers=1, num_heads=3, hidden_dim=192, mlp_dim=768,
        representation_size=16)
    path = tmp_path / "tv.pth"
    torch.save(tv.state_dict(), path)
    with pytest.raises(CheckpointError, match="heads.pre_logits"):
        vision_attn.create_model("vit_tiny_patch16_224", pretrained=path, **TINY)


# ------------------------------------------------------------------------------------ nothing is executed
class _Payload:
    """Unpickling this object creates the marker file: the code a malicious checkpoint would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _helper_function():  # pickled by reference
    return 42


def test_pickled_code_is_refused_and_not_run(tmp_path, tiny_state):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pth"
    torch.save({**tiny_state, "extra": _Payload(marker)}, path)

    with pytest.raises(CheckpointError, match="refused to load") as info:
        vision_attn.create_model("vit_tiny_patch16_224", pretrained=path, **TINY)
    assert str(path) in str(info.value)
    assert "safetensors" in str(info.value)  # says how to fix it
    assert not marker.exists()

    # the payload is real: an unsafe load would have run it
    with open(path, "rb") as f:
        torch.load(f, weights_only=False)
    assert marker.exists()


def test_pickled_function_is_refused(tmp_path, tiny_state):
    path = tmp_path / "fn.pth"
    torch.save({"state_dict": tiny_state, "hook": _helper_function}, path)
    with pytest.raises(CheckpointError, match="refused to load.*_helper_function"):
        read_state_dict(path)


def test_timm_train_checkpoint_with_args_namespace_loads(tmp_path, tiny_state):
    """timm's train.py saves {"state_dict", "optimizer", "args": argparse.Namespace, ...}."""
    path = tmp_path / "checkpoint-3.pth.tar"
    torch.save({"epoch": 3, "arch": "vit_tiny_patch16_224", "state_dict": tiny_state,
                "args": argparse.Namespace(lr=0.1, model="vit_tiny_patch16_224")}, path)
    assert read_state_dict(path).keys() == tiny_state.keys()


# ------------------------------------------------------------------------------------ fitting
def test_other_num_classes_reinitialises_head_and_keeps_the_rest(tmp_path, tiny_state):
    path = tmp_path / "w.pth"
    torch.save(tiny_state, path)
    with pytest.warns(UserWarning, match="re-initialised") as record:
        model = vision_attn.create_model("vit_tiny_patch16_224", pretrained=path, num_classes=10, **TINY)
    assert "head.weight (1000, 192)" in str(record[0].message)
    assert model.head.weight.shape == (10, 192)
    state = model.state_dict()
    for key, value in tiny_state.items():
        if not key.startswith("head."):
            assert torch.equal(state[key], value), key
    assert torch.equal(state["blocks.0.attn.qkv.weight"], tiny_state["blocks.0.attn.qkv.weight"])


def test_same_num_classes_loads_without_warning(tmp_path, tiny_state, recwarn):
    path = tmp_path / "w.pth"
    torch.save(tiny_state, path)
    model = vision_attn.create_model("vit_tiny_patch16_224", pretrained=path, **TINY)
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)]
    assert torch.equal(model.head.weight, tiny_state["head.weight"])


@pytest.mark.parametrize("wrap", [
    pytest.param(lambda sd: {"state_dict": {f"model.{k}": v for k, v in sd.items()}, "epoch": 4,
                             "global_step": 100}, id="lightning"),
    pytest.param(lambda sd: {"epoch": 9, "arch": "vit_tiny_patch16_224", "state_dict": sd,
                             "optimizer": torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))],
                                                         lr=0.1, momentum=0.9).state_dict(),
                             "version": 2, "metric": 71.5}, id="timm-train"),
    pytest.param(lambda sd: {f"module.{k}": v for k, v in sd.items()}, id="ddp-module-prefix"),
    pytest.param(lambda sd: {"model": {f"_orig_mod.{k}": v for k, v in sd.items()}}, id="compiled-in-model"),
])
def test_trainer_containers_load(tmp_path, tiny_state, wrap):
    path = tmp_path / "c.ckpt"
    torch.save(wrap(tiny_state), path)
    model = vision_attn.create_model("vit_tiny_patch16_224", pretrained=path, **TINY)
    state = model.state_dict()
    assert state.keys() == tiny_state.keys()
    assert all(torch.equal(state[k], v) for k, v in tiny_state.items())


# ------------------------------------------------------------------------------------ saving
@pytest.mark.parametrize("name", ["w.pth", "w.safetensors"])
def test_save_atomic_round_trip_leaves_no_temp_file(tmp_path, tiny_state, name):
    out = save_atomic(tiny_state, tmp_path / name)
    assert sorted(os.listdir(tmp_path)) == [name]
    loaded = read_state_dict(out)
    assert all(torch.equal(loaded[k], v) for k, v in tiny_state.items())


def test_save_atomic_failure_leaves_nothing(tmp_path):
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        save_atomic({"f": lambda: 0}, tmp_path / "bad.pth")
    assert os.listdir(tmp_path) == []


def test_save_atomic_missing_folder(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        save_atomic({"w": torch.zeros(1)}, tmp_path / "no" / "such" / "w.pth")
