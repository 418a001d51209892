"""Reading checkpoint files safely and fitting their state dicts to a model.

Nothing in a file is executed: ``torch.load(..., weights_only=True)`` or safetensors. A model class
may define ``convert_checkpoint(state_dict) -> state_dict`` that recognises foreign layouts (timm,
torchvision, official repos) and maps them to its own keys; this module then fits the classifier
and reports every key that does not fit.
"""
from __future__ import annotations

import argparse
import os
import pickle
import re
import tempfile
import warnings
from pathlib import Path
from typing import Collection

import torch
from torch import nn

from vision_attn.errors import CheckpointError

StateDict = dict[str, torch.Tensor]

# Containers written by common trainers: timm's train.py, Lightning, DeiT/Swin official, torchvision references.
_NESTED_KEYS = ("state_dict", "model", "module", "model_state", "state_dict_ema", "model_ema")
_WRAPPER_PREFIXES = ("module.", "model.", "_orig_mod.")


def read_state_dict(path: str | Path) -> StateDict:
    """Read a state dict from ``path`` without executing anything, unwrapping trainer containers."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file; check the path")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            obj = load_file(str(path), device="cpu")
        else:
            # timm's train.py stores its argparse.Namespace beside the weights: plain data, safe to allow
            with torch.serialization.safe_globals([argparse.Namespace]):
                obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        unsafe = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        if unsafe:
            raise CheckpointError(
                f"{path}: refused to load: the file holds the Python object {unsafe.group(1)}, and unpickling it "
                f"could run code; re-save only the weights with torch.save(model.state_dict(), path) or as .safetensors"
            ) from None
        raise CheckpointError(
            f"{path}: not a readable PyTorch checkpoint (the pickle data is damaged or of another format); "
            f"download or save the file again"
        ) from None
    except Exception as e:  # torch and safetensors raise many types for a damaged file
        detail = str(e).splitlines()[0] if str(e) else "no detail"
        raise CheckpointError(
            f"{path}: not a readable checkpoint ({type(e).__name__}: {detail}); the file may be truncated or "
            f"not a PyTorch/safetensors file: download or save it again"
        ) from None
    return _unwrap(obj, path)


def _unwrap(obj: object, path: Path) -> StateDict:
    while isinstance(obj, dict) and not _is_state_dict(obj):
        inner = next((obj[k] for k in _NESTED_KEYS if isinstance(obj.get(k), dict)), None)
        if inner is None:
            raise CheckpointError(
                f"{path}: holds a dict without tensors under known keys {list(obj)[:8]}; expected a state dict "
                f"or a container with one of {_NESTED_KEYS}"
            )
        obj = inner
    if not isinstance(obj, dict) or not obj:
        raise CheckpointError(f"{path}: holds {type(obj).__name__}, not a state dict of tensors")
    for prefix in _WRAPPER_PREFIXES:
        if all(k.startswith(prefix) for k in obj):
            obj = {k[len(prefix):]: v for k, v in obj.items()}
    return obj


def _is_state_dict(obj: dict) -> bool:
    return bool(obj) and all(isinstance(v, torch.Tensor) for v in obj.values())


def fit_state_dict(model: nn.Module, state_dict: StateDict, source: str = "checkpoint",
                   optional: Collection[str] = ()) -> StateDict:
    """Map ``state_dict`` to ``model``'s keys and check every key and shape.

    Classifier weights (``model.classifier_keys``) of another class count are dropped with a warning,
    so the model keeps its freshly initialised head. Keys in ``optional`` (blocks added to a
    pretrained backbone) may be absent from the file, all of them, and then keep their initialisation. Anything else
    that does not fit raises a :class:`CheckpointError` naming the keys.
    """
    convert = getattr(model, "convert_checkpoint", None)
    if convert is not None:
        state_dict = convert(state_dict)
    own = model.state_dict()
    head = [k for k in getattr(model, "classifier_keys", ()) if k in own]
    refit = [k for k in head if k not in state_dict or state_dict[k].shape != own[k].shape]
    if refit:
        found = ", ".join(f"{k} {tuple(state_dict[k].shape)}" if k in state_dict else f"{k} absent" for k in refit)
        state_dict = {k: v for k, v in state_dict.items() if k not in head}
    # optional keys are all absent (a plain backbone) or all checked (a file saved with the blocks)
    optional = set() if any(k in state_dict for k in optional) else set(optional)
    missing = [k for k in own if k not in state_dict and not (refit and k in head) and k not in optional]
    unexpected = [k for k in state_dict if k not in own]
    mismatched = [f"{k}: file {tuple(v.shape)} vs model {tuple(own[k].shape)}"
                  for k, v in state_dict.items() if k in own and v.shape != own[k].shape]
    if missing or unexpected or mismatched:
        parts = []
        for label, keys in (("shape mismatch", mismatched), ("missing from the file", missing),
                            ("not in the model", unexpected)):
            if keys:
                more = f" (+{len(keys) - 6} more)" if len(keys) > 6 else ""
                parts.append(f"{len(keys)} {label}: {'; '.join(keys[:6])}{more}")
        raise CheckpointError(
            f"{source}: does not fit {type(model).__name__} ({' | '.join(parts)}); the file holds another "
            f"architecture or variant: pick the matching model name"
        )
    if refit:
        warnings.warn(
            f"{source}: the classifier in the file ({found}) does not fit the model's num_classes; "
            f"it is re-initialised and needs training",
            stacklevel=3,
        )
    return state_dict


def load_checkpoint(model: nn.Module, path: str | Path, optional: Collection[str] = ()) -> nn.Module:
    """Load the file at ``path`` into ``model`` (any supported layout), strictly apart from a refitted
    head and the ``optional`` keys the file lacks (see :func:`fit_state_dict`)."""
    state_dict = fit_state_dict(model, read_state_dict(path), source=str(path), optional=optional)
    own = model.state_dict()
    strict = all(k in state_dict for k in own)
    model.load_state_dict(state_dict, strict=strict)
    return model


def save_atomic(obj: object, path: str | Path) -> Path:
    """``torch.save`` to a temporary file beside ``path`` and rename it, so no partial file is left."""
    path = Path(path)
    if not path.parent.is_dir():
        raise CheckpointError(f"{path}: the folder {path.parent} does not exist; create it first")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import save_file

            save_file({k: v.contiguous() for k, v in obj.items()}, tmp)
        else:
            torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
