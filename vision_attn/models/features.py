"""Feature maps the way timm's users take them: ``feature_info``, the indices of the levels to take,
and ``features_only`` models.

A model that offers feature maps (every registered classifier, through
:class:`~vision_attn.models.contract.TimmContract`) has ``feature_info``, a list with one dict per
level: ``num_chs`` (channels), ``reduction`` (stride against the input) and ``module`` (the
submodule whose output the level is), as timm defines it; and ``forward_intermediates``.
:class:`FeatureModule` is ``create_model(name, features_only=True, ...)``: the model pruned after the
last level taken, whose forward returns the maps of ``out_indices``, in the container and layout that
timm's ``feature_cls`` of the same name gives.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError

__all__ = ["take_indices", "check_output_fmt", "FeatureInfo", "FeatureModule", "FEATURE_CFG_KEYS", "FEATURE_CLS",
           "feature_kind"]


def take_indices(count: int, indices: int | Sequence[int] | None) -> tuple[list[int], int]:
    """Absolute level indices and the largest of them, with timm's meaning of ``indices``: ``None``
    all ``count`` levels, an int ``n`` the last ``n``, a sequence those levels (negative from the end)."""
    if indices is None:
        indices = count
    if isinstance(indices, bool) or not isinstance(indices, (int, Sequence)) or isinstance(indices, str):
        raise ConfigError(f"indices={indices!r}: give a count of last levels, a list of level indices or None (all)")
    if isinstance(indices, int):
        if not 0 < indices <= count:
            raise ConfigError(f"indices={indices}: the model has {count} feature levels; take the last 1..{count}")
        take = list(range(count - indices, count))
    else:
        take = []
        for i in indices:
            if isinstance(i, bool) or not isinstance(i, int) or not -count <= i < count:
                raise ConfigError(f"indices={list(indices)!r}: {i!r} is not a feature level of the {count} "
                                  f"(0..{count - 1}, or negative from the end)")
            take.append(i % count)
        if not take:
            raise ConfigError("indices=[]: give at least one feature level")
    return take, max(take)


def check_output_fmt(output_fmt: str, allowed: Sequence[str]) -> str:
    if output_fmt not in allowed:
        raise ConfigError(f"output_fmt={output_fmt!r}: this model gives feature maps as {' or '.join(allowed)}")
    return output_fmt


class FeatureInfo:
    """The levels a :class:`FeatureModule` returns, with timm's accessors (``channels()``,
    ``reduction()``, ``module_name()``, each for all levels or one ``idx``); a list of the level dicts
    (``len``, indexing and iteration)."""

    def __init__(self, info: Sequence[Mapping[str, Any]], out_indices: Sequence[int]) -> None:
        self.info = [dict(info[i]) for i in out_indices]
        self.out_indices = tuple(out_indices)

    def get(self, key: str, idx: int | Sequence[int] | None = None) -> Any:
        if idx is None:
            return [level[key] for level in self.info]
        if isinstance(idx, int):
            return self.info[idx][key]
        return [self.info[i][key] for i in idx]

    def channels(self, idx: int | Sequence[int] | None = None) -> Any:
        return self.get("num_chs", idx)

    def reduction(self, idx: int | Sequence[int] | None = None) -> Any:
        return self.get("reduction", idx)

    def module_name(self, idx: int | Sequence[int] | None = None) -> Any:
        return self.get("module", idx)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return self.info[idx]

    def __len__(self) -> int:
        return len(self.info)

    def __iter__(self):
        return iter(self.info)

    def __repr__(self) -> str:
        return f"FeatureInfo({self.info})"


FEATURE_CFG_KEYS = ("norm",)
"""Keys of ``feature_cfg`` that ``create_model(..., features_only=True, feature_cfg=...)`` takes."""

FEATURE_CLS = ("list", "dict", "hook", "fx", "getter")
"""timm's ``feature_cls`` values. ``"getter"``: the maps of ``forward_intermediates`` (NCHW unless
``output_fmt``); the others: each level's output as the level computes it (timm's forward hooks, fx
graph, or the model rebuilt from its top-level modules), in a list, or for ``"dict"`` an OrderedDict
keyed by the level indices as given (timm's ``str(out_indices[i])``)."""

_AS_COMPUTED = ("list", "dict", "hook", "fx")
_DROPPED_CFG_KEYS = ("num_classes", "classifier", "global_pool")  # what timm's features_only cfg leaves out


def feature_kind(feature_cls: Any) -> str | None:
    """timm's reading of a ``feature_cls`` name: case-insensitive, any name containing ``"hook"`` is
    ``"hook"``; ``None`` stays None (the family's default)."""
    if feature_cls is None:
        return None
    kind = feature_cls.lower() if isinstance(feature_cls, str) else None
    if kind is not None and "hook" in kind:
        return "hook"
    if kind not in FEATURE_CLS:
        raise ConfigError(f"feature_cls={feature_cls!r} is not one of timm's feature classes: give "
                          f"{', '.join(repr(k) for k in FEATURE_CLS)} (case-insensitive)")
    return kind


def _top_level(model: nn.Module, module: str) -> bool:
    """Whether timm's list and dict features, which rebuild a model from its top-level modules (and
    the modules of a top-level ``nn.Sequential``), reach the level module ``module``."""
    parent, dot, _ = module.partition(".")
    return not dot or ("." not in module[len(parent) + 1:] and isinstance(model.get_submodule(parent), nn.Sequential))


class FeatureModule(nn.Module):
    """A model's feature maps: images (B, C, H, W) -> the maps of the ``out_indices`` levels.

    The model is pruned after the last level taken (blocks or stages after it, the classifier, and
    the final norm unless ``norm``), so every parameter left is used. ``feature_cls`` is timm's
    (:data:`FEATURE_CLS`): ``None`` the family's default, as timm's (a ViT's ``"getter"``, a Swin's or
    ResNet's ``"list"``), with ``output_fmt`` and ``norm`` of ours; ``"getter"`` the maps of
    ``forward_intermediates``, NCHW unless ``output_fmt`` (``"NLC"``: ViT tokens, ``"NHWC"``: Swin);
    ``"hook"``, ``"fx"``, ``"list"``: a list of each level's output as computed (ViT: a block's tokens,
    prefix tokens included; Swin: NHWC; ResNet: NCHW), ``"dict"`` the same in an OrderedDict keyed as
    timm keys it. ``"list"`` and ``"dict"`` are refused where timm refuses them (a ViT: its blocks
    lie inside a ModuleList). ``norm`` applies the model's final norm to the maps (Swin: to the last
    stage's). ``feature_info`` describes the levels returned. One class for every family: the
    model's ``forward_intermediates`` and ``level_outputs`` do the work.
    """

    def __init__(self, model: nn.Module, out_indices: int | Sequence[int] | None = None,
                 output_fmt: str | None = None, norm: bool = False, feature_cls: str | None = None) -> None:
        super().__init__()
        if not isinstance(norm, bool):
            raise ConfigError(f"feature_cfg norm={norm!r}: give True or False")
        kind = feature_kind(feature_cls)
        if kind in _AS_COMPUTED:
            self._check_as_computed(model, feature_cls, kind, output_fmt, norm)
        elif kind == "getter":
            output_fmt = output_fmt or model.output_fmts[0]  # timm's getter: NCHW, whatever the family's default
        if kind not in _AS_COMPUTED:
            output_fmt = output_fmt or model.default_output_fmt
            check_output_fmt(output_fmt, model.output_fmts)
        if out_indices is None:
            out_indices = model.default_out_indices
        count = len(model.feature_info)
        self.out_indices = model.prune_intermediate_layers(out_indices, prune_norm=not norm, prune_head=True)
        # timm keys a dict by the indices as given: n -> the last n as -n..-1, a list as it is
        given = range(-out_indices, 0) if isinstance(out_indices, int) else range(count) if out_indices is None else out_indices
        keys = dict(zip(take_indices(count, list(given))[0], (str(i) for i in given)))
        self.dict_keys = [keys[i] for i in sorted(self.out_indices)]
        self.feature_info = FeatureInfo(model.feature_info, self.out_indices)
        self.feature_cls, self.output_fmt, self.norm = kind, output_fmt, norm
        self.model = model
        cfg = getattr(model, "pretrained_cfg", None)
        self.pretrained_cfg = self.default_cfg = (
            None if cfg is None else {k: v for k, v in cfg.items() if k not in _DROPPED_CFG_KEYS})

    @staticmethod
    def _check_as_computed(model: nn.Module, feature_cls: str, kind: str, output_fmt: str | None, norm: bool) -> None:
        instead = "feature_cls='getter' (or none)"
        if output_fmt is not None:
            raise ConfigError(f"feature_cls={feature_cls!r} returns each level's output as the model computes it; "
                              f"output_fmt={output_fmt!r} applies to {instead}")
        if norm:
            raise ConfigError(f"feature_cls={feature_cls!r} returns each level's output as the model computes it; "
                              f"feature_cfg norm=True applies to {instead}")
        if kind in ("list", "dict"):
            inner = [f["module"] for f in model.feature_info if not _top_level(model, f["module"])]
            if inner:
                raise ConfigError(
                    f"feature_cls={feature_cls!r}: timm's list and dict features rebuild the model from its top-level "
                    f"modules, and {type(model).__name__}'s levels ({inner[0]}, ...) lie deeper (timm refuses it too); "
                    f"use feature_cls='hook' or 'fx' (each level's output as computed, in a list) or 'getter' "
                    f"(NCHW maps, or output_fmt={model.output_fmts[-1]!r})")

    def forward(self, x: torch.Tensor) -> list[torch.Tensor] | OrderedDict[str, torch.Tensor]:
        if self.feature_cls in _AS_COMPUTED:
            maps = self.model.level_outputs(x, self.out_indices)
        else:
            maps = self.model.forward_intermediates(x, indices=self.out_indices, norm=self.norm,
                                                    output_fmt=self.output_fmt, intermediates_only=True)
        return OrderedDict(zip(self.dict_keys, maps)) if self.feature_cls == "dict" else maps

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.model.set_grad_checkpointing(enable)

    def extra_repr(self) -> str:
        fmt = "as computed" if self.feature_cls in _AS_COMPUTED else repr(self.output_fmt)
        return (f"out_indices={list(self.out_indices)}, feature_cls={self.feature_cls!r}, output_fmt={fmt}, "
                f"norm={self.norm}")
