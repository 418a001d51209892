"""Which layer a class-activation map reads, per model family, and how its output becomes a (B, C, h, w)
map (pytorch-grad-cam's ``reshape_transform``).

- ViT/DeiT/EVA/CLIP towers: with a class token read by the head, the last block's first norm (its output
  feeds the attention that forms the class token; the last block's own output reaches the head through
  the class token alone, so its patch tokens get no gradient); with average pooling, the last block;
  tokens (B, prefix + h*w, D) -> the patches (B, D, h, w).
- Swin (V1, V2): the last stage's output, NHWC (B, h, w, C) -> NCHW.
- YOLO YAML networks (detectors, segmenters, YOLO classifiers): the rows the head reads (a detector's
  three levels). A detection's gradient map reads the one level its anchor is on (the score of a stride-8
  anchor has no gradient on the stride-32 map; a stride-32 score reaches the finer maps only through the
  neck, and pytorch-grad-cam scales each layer's map to 0..1 before averaging, which would give those
  indirect maps equal say); EigenCAM, which has no target, averages all levels' maps at input size.
- Other CNNs: the last block of the deepest feature level of timm's interface (``feature_info``) whose map
  is at least 4x4 on the input (the last level at 224 px; an earlier one on small images).

``--layer NAME`` names any module of ``model.named_modules()``, ``--layer A,B`` several (pytorch-grad-cam
draws each layer's map, scales it to 0..1 and averages them at input size: the LayerCAM paper's fusion of
layers); a name that is not there is a one-line error listing the candidates, closest first.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.swin import SwinTransformer
from vision_attn.models.vit import VisionTransformer
from vision_attn.models.yolo import DetectionModel

__all__ = ["TargetLayers", "target_layers", "closest_names"]


@dataclass(frozen=True)
class TargetLayers:
    """``names`` and ``modules`` the map is read from; ``reshape``: their output -> (B, C, h, w) (None:
    already so); ``levels``: the modules are a detector head's inputs, finest level first."""

    names: tuple[str, ...]
    modules: tuple[nn.Module, ...]
    reshape: Callable[[torch.Tensor], torch.Tensor] | None
    levels: bool = False

    def at_level(self, level: int | None) -> TargetLayers:
        """The layer of one head level (a target's :attr:`~vision_attn.tasks.task.ExplainTarget.level`)
        when these are a head's levels and ``level`` is given, else these layers."""
        if not self.levels or level is None:
            return self
        return TargetLayers((self.names[level],), (self.modules[level],), self.reshape)


def _tokens_to_grid(model: nn.Module, x: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """(B, prefix + h*w, D) tokens of ``model`` on ``x`` -> (B, D, h, w): class, distillation and register
    tokens dropped, the patches laid on the patch grid."""
    ph, pw = model.patch_embed.patch_size
    h, w = -(-x.shape[-2] // ph), -(-x.shape[-1] // pw)
    dim = model.embed_dim

    def reshape(tokens: torch.Tensor) -> torch.Tensor:
        if tokens.ndim == 4 and tuple(tokens.shape[1:]) == (h, w, dim):  # the patch embedding's (B, h, w, D)
            return tokens.permute(0, 3, 1, 2)
        if tokens.ndim != 3:  # a convolution's map (--layer patch_embed.proj)
            return tokens
        patches = tokens[:, tokens.shape[1] - h * w:]
        return patches.reshape(tokens.shape[0], h, w, tokens.shape[-1]).permute(0, 3, 1, 2)

    return reshape


def _nhwc_to_nchw(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 3, 1, 2)


MIN_SIDE = 4
"""A CNN's default level is the deepest whose map has at least this many cells a side (a 32 px input
reaches 1x1 at stride 32, where a map is one number)."""


def _default_names(model: nn.Module, x: torch.Tensor) -> list[str]:
    if isinstance(model, VisionTransformer):
        last = f"blocks.{len(model.blocks) - 1}"
        return [last if model.global_pool == "avg" else f"{last}.norm1"]
    if isinstance(model, DetectionModel):
        last = len(model.model) - 1
        return [f"model.{last - 1 if j == -1 else j}" for j in model.inputs[last]]
    info = getattr(model, "feature_info", None)
    if info:  # a stage's blocks may be run one by one, bypassing the stage's own call: its last block
        side = min(x.shape[-2:])
        fits = [level for level in info if side // int(level.get("reduction", 1)) >= MIN_SIDE]
        name = (fits or info[:1])[-1]["module"]
        stage = model.get_submodule(name)
        return [f"{name}.{len(stage) - 1}" if isinstance(stage, nn.Sequential) and len(stage) else name]
    raise ConfigError(f"{type(model).__name__}: no default layer to read a map from; name one with --layer")


def closest_names(name: str, names: list[str], n: int = 8) -> list[str]:
    """Up to ``n`` of ``names``, the closest to ``name`` first."""
    return sorted(names, key=lambda c: -difflib.SequenceMatcher(None, name, c).ratio())[:n]


def _check_called(model: nn.Module, x: torch.Tensor, names: list[str], modules: dict[str, nn.Module]) -> None:
    """A ConfigError for a named module that a forward pass never calls (a container whose children are
    run one by one), naming its children."""
    called: set[str] = set()
    handles = [modules[n].register_forward_hook(lambda *_, n=n: called.add(n)) for n in names]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    for n in names:
        if n not in called:
            children = ", ".join(f"{n}.{c}" for c, _ in modules[n].named_children())
            raise ConfigError(f"--layer {n}: the forward pass never calls it as one module (its parts are run "
                              f"one by one); name one of them: {children or 'none'}")


def target_layers(model: nn.Module, x: torch.Tensor, name: str | None = None) -> TargetLayers:
    """The layers to read for ``model`` on the input ``x`` (``name``: a module's dotted name, or several
    separated by commas, whose maps are averaged; else the family's default) and the reshape of their
    outputs."""
    modules = dict(model.named_modules())
    names = [n.strip() for n in name.split(",")] if name else _default_names(model, x)
    for n in names:
        if n not in modules:
            found = ", ".join(closest_names(n, [m for m in modules if m]))
            raise ConfigError(f"--layer {n}: no such layer in {type(model).__name__}; candidates, closest first: "
                              f"{found}")
    _check_called(model, x, names, modules)
    reshape = None
    if isinstance(model, VisionTransformer):
        reshape = _tokens_to_grid(model, x)
    elif isinstance(model, SwinTransformer):
        reshape = _nhwc_to_nchw
    levels = not name and isinstance(model, DetectionModel) and len(names) > 1
    return TargetLayers(tuple(names), tuple(modules[n] for n in names), reshape, levels)
