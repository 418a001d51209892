"""A ``create_model`` network as a detector's backbone (``Backbone`` row) and a row that picks one of
its feature maps (``Index`` row).

``[-1, 1, Backbone, [swin_tiny_patch4_window7_224, {indices: [1, 2, 3]}]]`` builds the registered
model by name (never anything else: the name goes through :func:`vision_attn.create_model` and its
registry) with ``features_only=True`` (:class:`~vision_attn.models.features.FeatureModule`, the one
path that timm's users take) and returns a list of NCHW maps; ``[0, 1, Index, [2]]`` picks the
third. The builder knows every map's channel count, so the rows after an Index need no hand-written
channels.
"""
from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.features import FeatureModule, take_indices
from vision_attn.models.registry import create_model

__all__ = ["Backbone", "Index", "BACKBONE_KEYWORDS", "without_backbone_weights"]

BACKBONE_KEYWORDS = ("indices", "norm", "img_size", "attention", "pretrained", "drop_path_rate", "window_rule",
                     "window_size", "depth")
"""Keywords a Backbone row may give: ``indices`` and ``norm`` choose the maps, the rest go to
:func:`vision_attn.create_model`."""



def _default_levels(feature_info: Sequence[dict[str, Any]], count: int = 3) -> list[int]:
    """The levels a row takes when it names none: the last level of each of the last ``count``
    strides (Swin: stages 1, 2, 3; ResNet: layer2..layer4; ViT, one stride: its last block)."""
    take: list[int] = []
    for i in reversed(range(len(feature_info))):
        if len(take) < count and all(feature_info[j]["reduction"] != feature_info[i]["reduction"] for j in take):
            take.append(i)
    return sorted(take)


def _absolute(indices: int | Sequence[int], count: int, name: str) -> list[int]:
    """Level indices as sorted absolute positions (an int n: the last n), each level once."""
    if isinstance(indices, bool) or not isinstance(indices, (int, list, tuple)):
        raise ConfigError(f"indices={indices!r}: give a list of feature levels or a count of last ones")
    take, _ = take_indices(count, indices)
    if len(set(take)) != len(take):
        raise ConfigError(f"indices={list(indices)!r}: give distinct feature levels of {name}")
    return sorted(take)


class Backbone(nn.Module):
    """Feature maps of a registered model: (B, C_in, H, W) -> list of (B, C_i, H/s_i, W/s_i).

    ``model``: a :func:`vision_attn.list_models` name. ``indices`` count the model's feature levels
    (its ``feature_info``, as timm's ``out_indices``): Swin's four stages (strides 4, 8, 16, 32), one
    level per ViT/DeiT block (all at the patch stride), a ResNet's stem (stride 2) and
    ``layer1..layer4`` (strides 4..32); the default is the last three (a ViT's last block). ``norm``
    applies the model's final norm (Swin: to the last stage only). The model is
    ``create_model(name, features_only=True, out_indices=indices, ...)``: the classifier and every
    level after the last one taken are removed, so all parameters are used.
    """

    def __init__(self, model: str, options: dict[str, Any] | None = None, *, in_channels: int = 3) -> None:
        super().__init__()
        if not isinstance(model, str):
            raise ConfigError(f"Backbone: {model!r} is not a model name; give a name from `vision-attn models`")
        if ":" in model:
            raise ConfigError(f"Backbone: {model!r}: give a name from `vision-attn models` (its feature maps "
                              f"come from vision_attn's own models)")
        options = dict(options or {})
        unknown = [k for k in options if k not in BACKBONE_KEYWORDS]
        if unknown:
            raise ConfigError(f"Backbone: unknown keyword {unknown[0]!r}; known: {', '.join(BACKBONE_KEYWORDS)}")
        indices = options.pop("indices", None)
        norm = options.pop("norm", False)
        if not isinstance(norm, bool):
            raise ConfigError(f"Backbone: norm={norm!r}: give true or false")
        if in_channels != 3:
            options["in_chans"] = in_channels
        net = create_model(model, **options)
        levels = len(net.feature_info)
        take = _default_levels(net.feature_info) if indices is None else _absolute(indices, levels, model)
        if norm and net.norm_last_level_only and take[-1] != levels - 1:
            raise ConfigError(f"Backbone: norm=true applies {type(net).__name__}'s final norm to its last level "
                              f"({levels - 1}), which indices {take} do not take")
        self.net = FeatureModule(net, take, output_fmt="NCHW", norm=norm)
        self.name, self.norm, self.take = model, norm, take
        self.channels = self.net.feature_info.channels()
        self.strides = self.net.feature_info.reduction()
        self._register_load_state_dict_pre_hook(_earlier_keys)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.net(x)

    def extra_repr(self) -> str:
        return f"{self.name}, indices={self.take}, channels={self.channels}, strides={self.strides}"


def _earlier_keys(state_dict: dict[str, torch.Tensor], prefix: str, *args: Any) -> None:
    """Files saved before Backbone rows went through ``features_only`` have the model's keys under
    ``net.`` rather than ``net.model.``: rename them in place so that those detectors still load."""
    old, new = prefix + "net.", prefix + "net.model."
    for key in [k for k in state_dict if k.startswith(old) and not k.startswith(new)]:
        state_dict[new + key[len(old):]] = state_dict.pop(key)


def without_backbone_weights(model_yaml: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a detector YAML's dict whose Backbone rows name no ``pretrained`` file: what rebuilds a
    trained detector whose own weights are loaded next (the file may be gone, and reading it is wasted)."""
    out = copy.deepcopy(dict(model_yaml))
    for section in ("backbone", "head"):
        for row in out.get(section) or []:
            if (isinstance(row, list) and len(row) == 4 and row[2] == "Backbone" and isinstance(row[3], list)
                    and len(row[3]) == 2 and isinstance(row[3][1], dict)):
                row[3][1].pop("pretrained", None)
    return out


class Index(nn.Module):
    """One map of a Backbone row's list: ``[maps] -> maps[index]`` (as ultralytics' ``Index`` row)."""

    def __init__(self, index: int = 0) -> None:
        super().__init__()
        self.index = index

    def forward(self, x: list[torch.Tensor]) -> torch.Tensor:
        return x[self.index]

    def extra_repr(self) -> str:
        return f"index={self.index}"
