"""A Hugging Face ``transformers`` folder read as data: ``config.json`` (bounded JSON, never code) and
its weights (``model.safetensors``, ``pytorch_model.bin`` or their sharded ``*.index.json`` form),
through the one checkpoint reader (:mod:`vision_attn.io.state_dict`: safetensors, or
``torch.load(weights_only=True)``).

A folder whose config asks for its own code (``auto_map``, the classes ``trust_remote_code=True``
would import from the folder) is refused: vision_attn builds only the architectures it has.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vision_attn.errors import CheckpointError
from vision_attn.io.json import read_json
from vision_attn.io.state_dict import StateDict, read_checkpoint
from vision_attn.models.hf.family import Family, family_of

__all__ = ["TransformersFolder", "transformers_folder", "read_transformers_folder", "read_normalisation", "CONFIG",
           "WEIGHTS"]

CONFIG = "config.json"
PREPROCESSOR = "preprocessor_config.json"  # the image processor's settings: its mean and std are read
WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # transformers' names, in its order of preference
_INDEX = ".index.json"
_MAX_CONFIG_BYTES = 1 << 20  # a vision config is 1-3 kB (id2label of 21k classes: about 600 kB)


@dataclass(frozen=True)
class TransformersFolder:
    """What a ``transformers`` folder holds: its config (plain data), the family that maps it, the
    weight files (one, or the shards of an index) and the state dict under ``transformers``' keys."""

    folder: Path
    config: dict[str, Any]
    family: Family
    weights: tuple[Path, ...]
    state_dict: StateDict

    @property
    def source(self) -> str:
        """The weights file (or the folder of a sharded checkpoint), as messages name it."""
        return str(self.weights[0] if len(self.weights) == 1 else self.folder)

    def model_args(self) -> tuple[str, dict[str, Any]]:
        """The closest registered variant's name and the arguments that make it this folder's model
        (``num_classes``: the file's head, 0 when it has none). CheckpointError naming the config file
        when it states something vision_attn cannot build."""
        try:
            return self.family.model_args(self.config, self.state_dict)
        except CheckpointError as e:
            raise CheckpointError(f"{self.folder / CONFIG}: {e}") from None

    def normalisation(self) -> dict[str, tuple[float, ...]]:
        """``mean`` and ``std`` of the folder's ``preprocessor_config.json`` (``image_mean``,
        ``image_std``: CLIP's and SigLIP's differ from ImageNet's), or {} when it has none."""
        return read_normalisation(self.folder)

    def our_state_dict(self) -> StateDict:
        """The weights under vision_attn's keys."""
        return self.family.to_ours(self.state_dict, self.config)


def read_normalisation(folder: str | os.PathLike) -> dict[str, tuple[float, ...]]:
    """``{"mean": ..., "std": ...}`` from the ``preprocessor_config.json`` in ``folder`` (what
    transformers' image processor normalises with), or {} when there is none or it states neither."""
    path = Path(folder) / PREPROCESSOR
    if not path.is_file():
        return {}
    config = read_json(path, what="transformers preprocessor config", max_bytes=_MAX_CONFIG_BYTES, error=CheckpointError)
    out: dict[str, tuple[float, ...]] = {}
    for ours, theirs in (("mean", "image_mean"), ("std", "image_std")):
        value = config.get(theirs) if isinstance(config, dict) else None
        if value is None:
            continue
        if not (isinstance(value, list) and len(value) == 3 and all(isinstance(v, (int, float)) for v in value)):
            raise CheckpointError(f"{path}: {theirs}={value!r} is not three numbers (R, G, B)")
        out[ours] = tuple(float(v) for v in value)
    return out


def _has_config(folder: Path) -> bool:
    """A ``config.json`` that says it is transformers' (``model_type``); timm's hub folders carry a
    config.json too, with ``architecture`` instead."""
    path = folder / CONFIG
    if not path.is_file():
        return False
    config = read_json(path, what="transformers config", max_bytes=_MAX_CONFIG_BYTES, error=CheckpointError)
    return isinstance(config, dict) and "model_type" in config


def transformers_folder(path: str | os.PathLike) -> Path | None:
    """The folder when ``path`` is a ``transformers`` folder, or a weights file (``.safetensors``,
    ``.bin``) beside its ``config.json``; else None (any other checkpoint file or run folder)."""
    path = Path(path)
    if path.is_dir():
        return path if _has_config(path) else None
    if path.is_file() and path.suffix in (".safetensors", ".bin") and _has_config(path.parent):
        return path.parent
    return None


def _weight_files(folder: Path, given: Path | None) -> tuple[Path, ...]:
    if given is not None:
        return (given,)
    for name in WEIGHTS:
        if (folder / name).is_file():
            return (folder / name,)
        index = folder / (name + _INDEX)
        if index.is_file():
            table = read_json(index, what="transformers weight index", error=CheckpointError)
            weight_map = table.get("weight_map") if isinstance(table, dict) else None
            if not isinstance(weight_map, dict) or not weight_map:
                raise CheckpointError(f"{index}: has no weight_map of tensor names to shard files; download it again")
            shards = []
            for shard in dict.fromkeys(str(v) for v in weight_map.values()):
                if Path(shard).name != shard:  # a shard is a file name in the folder, never a path
                    raise CheckpointError(f"{index}: shard {shard!r} is not a file name in the folder")
                shards.append(folder / shard)
            missing = [p.name for p in shards if not p.is_file()]
            if missing:
                raise CheckpointError(f"{index}: lists shard(s) {', '.join(missing[:3])} that are not in {folder}; "
                                      "download the missing files")
            return tuple(shards)
    raise CheckpointError(f"{folder}: a transformers folder without weights: none of {', '.join(WEIGHTS)} "
                          f"(or their {_INDEX} shards); download the weights beside {CONFIG}")


def read_transformers_folder(path: str | os.PathLike) -> TransformersFolder:
    """Read the ``transformers`` folder at ``path`` (or the weights file beside its ``config.json``).

    CheckpointError naming the file when the config asks for the folder's own code, names an
    architecture vision_attn does not have, or the weights are missing, damaged or truncated.
    """
    path = Path(path)
    folder = transformers_folder(path)
    if folder is None:
        raise CheckpointError(f"{path}: not a transformers folder (no {CONFIG} with a model_type beside the weights)")
    config_path = folder / CONFIG
    config = read_json(config_path, what="transformers config", max_bytes=_MAX_CONFIG_BYTES, error=CheckpointError)
    remote = [k for k in ("auto_map", "trust_remote_code") if k in config]
    if remote:
        raise CheckpointError(
            f"{config_path}: asks for the folder's own code ({remote[0]}: {str(config[remote[0]])[:80]}); "
            f"vision_attn never runs code from a checkpoint and builds only the architectures it has")
    family = family_of(config, str(config_path))
    files = _weight_files(folder, path if path.is_file() else None)
    state_dict: StateDict = {}
    for file in files:
        part = read_checkpoint(file)
        if not isinstance(part, dict) or not all(hasattr(v, "shape") for v in part.values()):
            raise CheckpointError(f"{file}: does not hold a state dict of tensors; download it again")
        state_dict.update(part)
    return TransformersFolder(folder, dict(config), family, files, state_dict)
