"""AdamW parameter groups: no weight decay on norms, biases, tokens and position tables; layer-wise
learning-rate decay for fine-tuning. :func:`build_optimizer` (from :mod:`vision_attn.optimizers`):
torch's optimizer over the groups, with its fused step where it applies.

Layer ids follow the network's depth: 0 for the stem (patch embedding, tokens, position table; a
CNN's first convolution), 1..L for the blocks (ViT ``blocks.i``; Swin ``layers.i.blocks.j`` counted
through the stages, a patch merging with the block after it; ConvNeXt ``stages.i.blocks.j`` alike, a
stage's downsampling with its first block; ResNet ``layerK.j``), L+1 for the final
norm and head. With ``layer_decay`` d, layer i learns at ``lr * d ** (L + 1 - i)``: the head at the full
rate, the stem slowest. timm's schedulers multiply each group's ``lr_scale`` into the rate they set.
"""
from __future__ import annotations

import re
from typing import Any, Callable

import pytorch_lightning as pl
from pytorch_lightning.plugins.precision import MixedPrecision
from torch import nn

from vision_attn.optimizers import FUSED_DEVICES, STEP_KEYS, build_optimizer, fused_step_applies  # re-exported

__all__ = ["layer_ids", "param_groups", "no_weight_decay_names", "FUSED_DEVICES", "STEP_KEYS",
           "fused_step_applies", "lightning_clips_under_autocast", "build_optimizer"]

_STEM = re.compile(r"^(patch_embed|cls_token|dist_token|reg_token|pos_embed|pos_embed_win|pos_embed_window|absolute_pos_embed|rope|conv1|bn1|stem)\b")


def layer_ids(model: nn.Module) -> tuple[Callable[[str], int], int]:
    """A function parameter name -> layer id, and the number of block layers L."""
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, (nn.ModuleList, nn.Sequential)):  # ViT / DeiT
        n = len(blocks)

        def vit(name: str) -> int:
            m = re.match(r"^blocks\.(\d+)\.", name)
            return int(m.group(1)) + 1 if m else (0 if _STEM.match(name) else n + 1)

        return vit, n
    attr = "layers" if hasattr(model, "layers") else "stages"
    stages = getattr(model, attr, None)
    if isinstance(stages, (nn.ModuleList, nn.Sequential)) and all(hasattr(s, "blocks") for s in stages):  # Swin, ConvNeXt
        offsets, total = [], 0
        for stage in stages:
            offsets.append(total)
            total += len(stage.blocks)

        def swin(name: str) -> int:
            m = re.match(rf"^{attr}\.(\d+)\.(?:blocks\.(\d+)|downsample)", name)
            if m:
                return offsets[int(m.group(1))] + (int(m.group(2)) if m.group(2) else 0) + 1
            return 0 if _STEM.match(name) else total + 1

        return swin, total
    res = [getattr(model, f"layer{k}", None) for k in range(1, 5)]
    if all(isinstance(r, nn.Sequential) for r in res):  # ResNet
        offsets, total = [], 0
        for r in res:
            offsets.append(total)
            total += len(r)

        def resnet(name: str) -> int:
            m = re.match(r"^layer([1-4])\.(\d+)\.", name)
            if m:
                return offsets[int(m.group(1)) - 1] + int(m.group(2)) + 1
            return 0 if _STEM.match(name) else total + 1

        return resnet, total
    children = [n for n, _ in model.named_children()]  # anything else: one layer per top-level child

    def generic(name: str) -> int:
        top = name.split(".", 1)[0]
        return children.index(top) if top in children else len(children) - 1

    return generic, max(len(children) - 2, 0)


def no_weight_decay_names(model: nn.Module) -> set[str]:
    """Names the model asks to keep free of weight decay (``model.no_weight_decay()``)."""
    fn = getattr(model, "no_weight_decay", None)
    return set(fn()) if callable(fn) else set()


def param_groups(model: nn.Module, *, weight_decay: float, layer_decay: float | None = None) -> list[dict[str, Any]]:
    """Parameter groups for AdamW: weight decay only on matrices and kernels (not on 1-D tensors such as
    norms and biases, nor on the model's ``no_weight_decay()`` names), and with ``layer_decay`` an
    ``lr_scale`` per layer."""
    skip = no_weight_decay_names(model)
    ids, n_layers = layer_ids(model) if layer_decay is not None else ((lambda name: 0), 0)
    groups: dict[tuple[int, bool], dict[str, Any]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decay = p.ndim > 1 and name not in skip and not any(name.startswith(s + ".") for s in skip)
        layer = ids(name)
        key = (layer, decay)
        if key not in groups:
            scale = 1.0 if layer_decay is None else layer_decay ** (n_layers + 1 - layer)
            groups[key] = {"params": [], "param_names": [], "weight_decay": weight_decay if decay else 0.0,
                           "lr_scale": scale}
        groups[key]["params"].append(p)
        groups[key]["param_names"].append(name)
    return [groups[k] for k in sorted(groups)]


def lightning_clips_under_autocast(trainer: pl.Trainer) -> bool:
    """The trainer clips gradients under Lightning's mixed precision (``16-mixed``, ``bf16-mixed``)."""
    return isinstance(trainer.precision_plugin, MixedPrecision) and bool(trainer.gradient_clip_val)
