"""A ``create_model`` network as a detector's backbone (``Backbone`` row) and a row that picks one of
its feature maps (``Index`` row).

``[-1, 1, Backbone, [swin_tiny_patch4_window7_224, {indices: [1, 2, 3]}]]`` builds the registered
model by name (never anything else: the name goes through :func:`vision_attn.create_model` and its
registry) and returns a list of NCHW maps; ``[0, 1, Index, [2]]`` picks the third. The builder knows
every map's channel count, so the rows after an Index need no hand-written channels.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.registry import create_model
from vision_attn.models.swin import SwinTransformer
from vision_attn.models.vit import VisionTransformer

__all__ = ["Backbone", "Index", "BACKBONE_KEYWORDS"]

BACKBONE_KEYWORDS = ("indices", "norm", "img_size", "attention", "pretrained", "drop_path_rate", "window_rule",
                     "window_size")
"""Keywords a Backbone row may give: ``indices`` and ``norm`` choose the maps, the rest go to
:func:`vision_attn.create_model`."""


def _family(model: nn.Module) -> str:
    if isinstance(model, SwinTransformer):
        return "swin"
    if isinstance(model, VisionTransformer):
        return "vit"
    if all(hasattr(model, a) for a in ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4")):
        return "resnet"
    return ""


def _absolute(indices: int | Sequence[int], count: int, name: str) -> list[int]:
    """Stage/block indices as sorted absolute positions (an int n: the last n)."""
    if isinstance(indices, bool) or not isinstance(indices, (int, list, tuple)):
        raise ConfigError(f"indices={indices!r}: give a list of stage/block indices or a count of last ones")
    if isinstance(indices, int):
        if not 1 <= indices <= count:
            raise ConfigError(f"indices={indices}: {name} has {count} stages/blocks to take the last 1..{count} of")
        return list(range(count - indices, count))
    out = []
    for i in indices:
        if not isinstance(i, int) or isinstance(i, bool) or not -count <= i < count:
            raise ConfigError(f"indices={list(indices)!r}: {i!r} is not a stage/block of {name} "
                              f"(0..{count - 1}, or negative from the end)")
        out.append(i % count)
    if not out or len(set(out)) != len(out):
        raise ConfigError(f"indices={list(indices)!r}: give distinct stage/block indices of {name}")
    return sorted(out)


class Backbone(nn.Module):
    """Feature maps of a registered model: (B, C_in, H, W) -> list of (B, C_i, H/s_i, W/s_i).

    ``model``: a :func:`vision_attn.list_models` name (or ``"timm:NAME"``). Swin: maps after stages
    ``indices`` (strides 4, 8, 16, 32; default the last three). ViT/DeiT: token maps after blocks
    ``indices`` (all at the patch stride; default the last). ResNet (with ``attention=`` from
    :func:`~vision_attn.create_model`): outputs of ``layer1..layer4`` (strides 4..32; default the last
    three). ``norm`` applies the model's final norm (Swin: to the last stage only). The classifier
    and every stage or block after the last one taken are removed, so all parameters are used.
    """

    def __init__(self, model: str, options: dict[str, Any] | None = None, *, in_channels: int = 3) -> None:
        super().__init__()
        if not isinstance(model, str):
            raise ConfigError(f"Backbone: {model!r} is not a model name; give a name from `vision-attn models`")
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
        family = _family(net)
        if not family:
            raise ConfigError(f"Backbone: {model!r} ({type(net).__name__}) has no feature stages this row knows; "
                              "use a ViT, DeiT, Swin or ResNet name")
        self.name, self.family, self.norm = model, family, norm
        if family == "swin":
            take = _absolute(3 if indices is None else indices, net.num_layers, model)
            if norm and take[-1] != net.num_layers - 1:
                raise ConfigError(f"Backbone: norm=true applies Swin's final norm to its last stage ({net.num_layers - 1}),"
                                  f" which indices {take} do not take")
            self.channels = [net.feature_info[i]["num_chs"] for i in take]
            self.strides = [net.feature_info[i]["reduction"] for i in take]
            net.layers = net.layers[: take[-1] + 1]
            net.head = nn.Identity()
            if not norm:
                net.norm = nn.Identity()
        elif family == "vit":
            take = _absolute(1 if indices is None else indices, len(net.blocks), model)
            self.channels = [net.embed_dim] * len(take)
            self.strides = [net.patch_embed.patch_size[0]] * len(take)
            net.blocks = net.blocks[: take[-1] + 1]
            for attr in ("head", "head_dist", "fc_norm"):
                if getattr(net, attr, None) is not None:
                    setattr(net, attr, nn.Identity())
            if not norm:
                net.norm = nn.Identity()
        else:
            take = _absolute(3 if indices is None else indices, 4, model)
            net.fc, net.avgpool = nn.Identity(), nn.Identity()
            for i in range(take[-1] + 2, 5):
                delattr(net, f"layer{i}")
            self.strides = [4 * 2**i for i in take]
            self.channels = []
        self.take = take
        self.net = net
        if family == "resnet":  # channels from a probe: attention blocks may sit inside the stages
            net.eval()
            with torch.no_grad():
                probe = torch.zeros(1, in_channels, 64, 64, device=_device(net))
                self.channels = [m.shape[1] for m in self._resnet_maps(probe)]
            net.train()

    def _resnet_maps(self, x: torch.Tensor) -> list[torch.Tensor]:
        net = self.net
        x = net.maxpool(net.relu(net.bn1(net.conv1(x))))
        maps = []
        for i in range(self.take[-1] + 1):
            x = getattr(net, f"layer{i + 1}")(x)
            if i in self.take:
                maps.append(x)
        return maps

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        if self.family == "resnet":
            return self._resnet_maps(x)
        return self.net.forward_intermediates(x, self.take, norm=self.norm)

    def extra_repr(self) -> str:
        return f"{self.name}, indices={self.take}, channels={self.channels}, strides={self.strides}"


def _device(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


class Index(nn.Module):
    """One map of a Backbone row's list: ``[maps] -> maps[index]`` (as ultralytics' ``Index`` row)."""

    def __init__(self, index: int = 0) -> None:
        super().__init__()
        self.index = index

    def forward(self, x: list[torch.Tensor]) -> torch.Tensor:
        return x[self.index]

    def extra_repr(self) -> str:
        return f"index={self.index}"
