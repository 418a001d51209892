"""How one Hugging Face ``transformers`` model type maps to a vision_attn model: a :class:`Family`.

A family reads ``config.json`` as plain data (never code from the folder): :attr:`Family.model_args`
gives the registered name of the closest vision_attn variant and the constructor arguments that set
every size the folder's config states (so any size builds, not only the published ones), and
:attr:`Family.to_ours` maps the folder's state dict (``transformers``' keys, its base-model prefix
such as ``vit.`` present or not) to our keys. :attr:`Family.from_ours` is the inverse, for
``vision-attn convert --to transformers``: a model of ours -> (``config.json`` as a dict, the state
dict under ``transformers``' keys).

Each family's module documents its historical layout where it maps it (``hf/vit.py``, ``hf/swin.py``,
``hf/clip.py``) and registers itself with :func:`register_family`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from torch import nn

from vision_attn.errors import CheckpointError
from vision_attn.io.state_dict import StateDict

__all__ = ["Family", "FAMILIES", "register_family", "family_of", "strip_prefix", "num_labels", "Name",
           "inverse_table", "lookup"]

Config = Mapping[str, Any]
Name = str | tuple[str, ...]
"""A name table's entry: our module (or parameter) name -> transformers' name, or the names of the
tensors that ours packs in order (our ``attn.qkv`` is transformers' ``(q_proj, k_proj, v_proj)``)."""
_PARAMS = ("weight", "bias")


@dataclass(frozen=True)
class Family:
    """One or more ``model_type`` values of ``config.json`` and how they map to vision_attn.

    ``model_args(config, state_dict) -> (name, kwargs)``: a registered model name and the keyword
    arguments that make it the folder's architecture; ``kwargs["num_classes"]`` is the class count of
    the head the file holds (0: no head). ``to_ours(state_dict, config) -> state_dict``: our keys.
    ``from_ours(model, state_dict) -> (config, state_dict)``: the folder ``transformers`` would
    write for ``model`` (None: this family is read only); it raises CheckpointError naming what the
    peer lacks when ``model`` has something it cannot hold.
    """

    model_types: tuple[str, ...]
    model_args: Callable[[Config, StateDict], tuple[str, dict[str, Any]]]
    to_ours: Callable[[StateDict, Config], StateDict]
    from_ours: Callable[[nn.Module, StateDict], tuple[dict[str, Any], StateDict]] | None = None
    description: str = ""


FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> Family:
    for t in family.model_types:
        if t in FAMILIES:
            raise CheckpointError(f"transformers model_type {t!r} is mapped twice")
        FAMILIES[t] = family
    return family


def family_of(config: Config, source: str) -> Family:
    """The family of a ``config.json``; CheckpointError naming ``source`` and the known types."""
    model_type = config.get("model_type")
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        known = ", ".join(sorted(FAMILIES))
        raise CheckpointError(f"{source}: model_type {model_type!r} is not an architecture vision_attn has "
                              f"(it reads {known}); load it with transformers itself")
    return family


def strip_prefix(state_dict: StateDict, *prefixes: str) -> StateDict:
    """``state_dict`` with the first of ``prefixes`` (a base-model prefix such as ``"vit."``) taken off
    the keys that carry it; the others (a head's ``classifier.*``) are kept as they are."""
    out: StateDict = {}
    for key, value in state_dict.items():
        for p in prefixes:
            if key.startswith(p):
                key = key[len(p):]
                break
        out[key] = value
    return out


def num_labels(state_dict: StateDict, *head_keys: str) -> int:
    """The class count of the first head weight among ``head_keys`` the file holds, else 0."""
    return next((int(state_dict[k].shape[0]) for k in head_keys if k in state_dict), 0)


def inverse_table(*tables: Mapping[str, Name]) -> dict[str, tuple[str, int, int]]:
    """transformers' name -> (our name, its part, the parts ours packs), over name ``tables``."""
    inverse: dict[str, tuple[str, int, int]] = {}
    for table in tables:
        for ours, theirs in table.items():
            names = (theirs,) if isinstance(theirs, str) else theirs
            for j, name in enumerate(names):
                inverse[name] = (ours, j, len(names))
    return inverse


def lookup(key: str, inverse: Mapping[str, tuple[str, int, int]]) -> tuple[str, int, int] | None:
    """(our parameter name, part, parts) of transformers' ``key`` (a full name in ``inverse``, or a
    module's ``.weight``/``.bias``), or None."""
    if key in inverse:
        return inverse[key]
    module, _, param = key.rpartition(".")
    if param in _PARAMS and module in inverse:
        ours, part, parts = inverse[module]
        return f"{ours}.{param}", part, parts
    return None
