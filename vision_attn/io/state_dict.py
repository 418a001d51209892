"""Reading checkpoints and state dicts from any supported file, without executing anything.

One reader serves every part of vision_attn: ``create_model(pretrained=...)``, a detector's
``model.pretrained``, ``yaml insert --checkpoint``, ``export --checkpoint`` and the run loader.

- :func:`read_checkpoint`: the object in a file: ``.safetensors`` (safetensors' reader), or a PyTorch
  pickle (``.pth``, ``.pt``, ``.bin``, Lightning's ``.ckpt``) read with ``torch.load(weights_only=True)``
  (both memory-mapped: a file's tensors take no memory of their own until they are copied),
  which builds tensors and plain containers only. A run folder stands for its ``best.ckpt`` (else its
  ``last.ckpt``). A pickle that names any other Python object (a function, a class) is refused with a
  :class:`CheckpointError` that says what it would have called; an ultralytics ``.pt`` is handed to
  :mod:`vision_attn.io.ultralytics_pt` and comes back as the plain
  :class:`~vision_attn.io.ultralytics_pt.UltralyticsCheckpoint` it holds.
- :func:`read_state_dict`: the tensors of a file, out of the containers trainers write (timm's
  ``state_dict``/``state_dict_ema``, Lightning's ``state_dict`` with the EMA's weights preferred,
  ``model``, ``module``, ...) with ``module.``/``model.``/``_orig_mod.`` wrappers taken off.
"""
from __future__ import annotations

import argparse
import io
import os
import pickle
import pickletools
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

from vision_attn.errors import CheckpointError
from vision_attn.io.ultralytics_pt import UltralyticsCheckpoint, read_ultralytics_checkpoint

__all__ = ["StateDict", "read_checkpoint", "read_state_dict", "run_checkpoint_path", "lightning_weights",
           "pickled_globals"]

StateDict = dict[str, torch.Tensor]

# Containers written by common trainers: timm's train.py, Lightning, DeiT/Swin official, torchvision references.
_NESTED_KEYS = ("state_dict", "model", "module", "model_state", "state_dict_ema", "model_ema")
_WRAPPER_PREFIXES = ("module.", "model.", "_orig_mod.")
# what torch.load(weights_only=True) itself rebuilds: not "a function the pickle would call"
_TORCH_OWN = ("torch.", "collections.OrderedDict", "collections.defaultdict", "builtins.", "_codecs.encode",
              "copyreg._reconstructor", "argparse.Namespace")
_SAFE_GLOBALS = [argparse.Namespace]  # timm's train.py stores its arguments beside the weights: plain data
_BLOCKED = (re.compile(r"Unsupported global: GLOBAL (\S+)"), re.compile(r"unsupported GLOBAL (\S+)"))
RUN_CHECKPOINTS = ("best.ckpt", "last.ckpt")


def run_checkpoint_path(path: str | os.PathLike) -> Path:
    """``path`` itself, or for a run folder its ``best.ckpt`` (else ``last.ckpt``); CheckpointError
    when there is no such file."""
    path = Path(path)
    if path.is_dir():
        found = [path / n for n in RUN_CHECKPOINTS if (path / n).is_file()]
        if not found:
            raise CheckpointError(f"{path}: no such checkpoint: a folder without best.ckpt or last.ckpt; give a run "
                                  "folder (runs/NAME) or a checkpoint file")
        return found[0]
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file; check the path (a run's best.ckpt, or the run "
                              "folder runs/NAME)")
    return path


def pickled_globals(path: str | os.PathLike) -> list[str]:
    """The Python objects (``module.name``) a PyTorch file's pickle refers to, found by reading its
    opcodes (nothing is unpickled): what unpickling it would import and call."""
    raw = Path(path).read_bytes()
    if zipfile.is_zipfile(io.BytesIO(raw)):
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            member = next((n for n in z.namelist() if n.endswith("data.pkl")), None)
            raw = z.read(member) if member else b""
    names: list[str] = []
    strings: list[str] = []
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(raw)):
            if isinstance(arg, str) and "UNICODE" in op.name or op.name in ("STRING", "BINSTRING", "SHORT_BINSTRING"):
                strings.append(str(arg))
            elif op.name in ("GLOBAL", "INST"):
                names.append(str(arg).replace(" ", "."))
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                names.append(f"{strings[-2]}.{strings[-1]}")
    except Exception:  # noqa: BLE001 - a damaged pickle: report what was found before the damage
        pass
    return list(dict.fromkeys(names))


def _foreign(names: list[str]) -> list[str]:
    return [n for n in names if not n.startswith(_TORCH_OWN)]


def _refused(path: Path, names: list[str]) -> CheckpointError:
    shown = ", ".join(names[:4]) + (f" (+{len(names) - 4} more)" if len(names) > 4 else "")
    return CheckpointError(
        f"{path}: refused to load: the file's pickle would call the Python object(s) {shown}, and unpickling it "
        f"could run code; re-save only the weights with torch.save(model.state_dict(), path) or as .safetensors")


def _ultralytics_pt(path: Path, names: list[str]) -> UltralyticsCheckpoint:
    """The one place an ultralytics ``.pt`` (a pickle of ``{"model": DetectionModel, "ema": ...}``) is
    handed on: :mod:`vision_attn.io.ultralytics_pt` rebuilds its tensors without ultralytics and without
    running anything, and returns what it holds as plain data (its float32 weights, ``ema`` when the
    file has one, its model YAML dict, class names and training arguments). :func:`read_state_dict`
    takes its weights; the run loader (:func:`vision_attn.tasks.load_run`) lays it out as a detection
    run's checkpoint."""
    return read_ultralytics_checkpoint(path)


def read_checkpoint(path: str | os.PathLike) -> Any:
    """The object in a checkpoint file (or a run folder's best/last checkpoint), read without
    executing anything (an ultralytics ``.pt``: an :class:`UltralyticsCheckpoint`); CheckpointError
    naming the file (and what its pickle would call) otherwise."""
    path = run_checkpoint_path(path)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path), device="cpu")
        with torch.serialization.safe_globals(_SAFE_GLOBALS), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*pickle protocol.*")  # raw pickles of protocol 4+
            # a zip file (torch >= 1.6) is memory-mapped: its tensors are pages of the file until copied
            # into a model, not a second copy in memory (a legacy pickle is read whole)
            return torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as e:
        blocked = [m.group(1) for rx in _BLOCKED for m in [rx.search(str(e))] if m]
        names = list(dict.fromkeys(blocked + _foreign(pickled_globals(path))))
        if any(n.startswith("ultralytics.") for n in names):
            return _ultralytics_pt(path, names)
        if names:
            raise _refused(path, names) from None
        raise CheckpointError(
            f"{path}: not a readable checkpoint (the pickle data is damaged or of another format); "
            f"download or save the file again") from None
    except Exception as e:  # torch and safetensors raise many types for a damaged file
        detail = str(e).splitlines()[0] if str(e) else "no detail"
        raise CheckpointError(
            f"{path}: not a readable checkpoint ({type(e).__name__}: {detail}); the file may be truncated or "
            f"not a PyTorch/safetensors file: download or save it again") from None


def is_lightning(obj: Any) -> bool:
    """A Lightning checkpoint: a dict with a ``state_dict`` and Lightning's version or hyper-parameters."""
    return isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict) and \
        ("pytorch-lightning_version" in obj or "hyper_parameters" in obj)


def lightning_weights(state: dict[str, Any]) -> StateDict:
    """The network's weights in a vision_attn LightningModule's ``state_dict``: the EMA's
    (``ema.module.*``) when the run kept one, else the live ``model.*``, with that prefix taken off."""
    prefix = "ema.module." if any(k.startswith("ema.module.") for k in state) else "model."
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def read_state_dict(path: str | os.PathLike) -> StateDict:
    """The state dict in ``path`` (any supported file or a run folder), unwrapped from trainer containers."""
    path = Path(path)
    obj = read_checkpoint(path)
    if isinstance(obj, UltralyticsCheckpoint):  # its keys are ultralytics' own (model.0.conv.weight): kept
        return dict(obj.state_dict) if obj.state_dict else _unwrap(obj.state_dict, path)
    if is_lightning(obj):
        weights = lightning_weights(obj["state_dict"])
        if weights:
            return weights
    return _unwrap(obj, path)


def _unwrap(obj: object, path: Path) -> StateDict:
    while isinstance(obj, dict) and not _is_state_dict(obj):
        inner = next((obj[k] for k in _NESTED_KEYS if isinstance(obj.get(k), dict)), None)
        if inner is None:
            raise CheckpointError(
                f"{path}: holds a dict without tensors under known keys {list(obj)[:8]}; expected a state dict "
                f"or a container with one of {_NESTED_KEYS}")
        obj = inner
    if not isinstance(obj, dict) or not obj:
        raise CheckpointError(f"{path}: holds {type(obj).__name__}, not a state dict of tensors")
    for prefix in _WRAPPER_PREFIXES:
        if all(k.startswith(prefix) for k in obj):
            obj = {k[len(prefix):]: v for k, v in obj.items()}
    return obj


def _is_state_dict(obj: dict) -> bool:
    return bool(obj) and all(isinstance(v, torch.Tensor) for v in obj.values())
