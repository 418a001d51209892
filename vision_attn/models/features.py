"""Feature maps the way timm's users take them: ``feature_info``, the indices of the levels to take,
and ``features_only`` models.

A model that offers feature maps (every registered classifier, through
:class:`~vision_attn.models.contract.TimmContract`) has ``feature_info``, a list with one dict per
level: ``num_chs`` (channels), ``reduction`` (stride against the input) and ``module`` (the
submodule whose output the level is), as timm defines it; and ``forward_intermediates``.
:class:`FeatureModule` is ``create_model(name, features_only=True, ...)``: the model pruned after the
last level taken, whose forward returns the maps of ``out_indices``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError

__all__ = ["take_indices", "check_output_fmt", "FeatureInfo", "FeatureModule", "FEATURE_CFG_KEYS"]


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


class FeatureModule(nn.Module):
    """A model's feature maps: images (B, C, H, W) -> a list of maps, one per ``out_indices`` level.

    The model is pruned after the last level taken (blocks or stages after it, the classifier, and
    the final norm unless ``norm``), so every parameter left is used. ``norm`` applies the model's
    final norm to the maps (Swin: to the last stage's); ``output_fmt`` is ``"NCHW"``, or ``"NLC"``
    (ViT tokens) or ``"NHWC"`` (Swin) where the model gives those. ``feature_info`` describes the
    levels returned. One class for every family: the model's ``forward_intermediates`` does the work.
    """

    def __init__(self, model: nn.Module, out_indices: int | Sequence[int] | None = None,
                 output_fmt: str | None = None, norm: bool = False) -> None:
        super().__init__()
        if not isinstance(norm, bool):
            raise ConfigError(f"feature_cfg norm={norm!r}: give True or False")
        output_fmt = output_fmt or model.default_output_fmt
        check_output_fmt(output_fmt, model.output_fmts)
        if out_indices is None:
            out_indices = model.default_out_indices
        self.out_indices = model.prune_intermediate_layers(out_indices, prune_norm=not norm, prune_head=True)
        self.feature_info = FeatureInfo(model.feature_info, self.out_indices)
        self.output_fmt, self.norm = output_fmt, norm
        self.model = model
        self.pretrained_cfg = getattr(model, "pretrained_cfg", None)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.model.forward_intermediates(x, indices=self.out_indices, norm=self.norm,
                                                output_fmt=self.output_fmt, intermediates_only=True)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.model.set_grad_checkpointing(enable)

    def extra_repr(self) -> str:
        return f"out_indices={list(self.out_indices)}, output_fmt={self.output_fmt!r}, norm={self.norm}"
