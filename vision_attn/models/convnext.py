"""ConvNeXt (Liu et al. 2022) under timm's names, ``convnext_atto`` ... ``convnext_large``: one
configurable class :class:`ConvNeXt` with timm's keys (timm's files load as they are) and timm's
model interface; DINOv3's distilled ConvNeXts (Siméoni et al. 2025) are ``convnext_tiny`` ...
``convnext_large`` with other weights (timm's ``.dinov3_lvd1689m`` tags), loaded from timm files or
transformers' ``dinov3_convnext`` folders (:mod:`vision_attn.models.hf.convnext`).

Layout: a patchify ``stem`` (4x4 convolution of stride 4, LayerNorm2d), four ``stages`` of
:class:`~vision_attn.layers.convnext_block.ConvNeXtBlock` (each after the first begins with a
LayerNorm2d and a 2x2 convolution of stride 2), the head :class:`~vision_attn.layers.norm_head.NormPoolHead`
(mean over the map, LayerNorm, ``fc``). Four feature levels, ``stages.0`` .. ``stages.3`` at strides
4, 8, 16, 32 (timm's ``feature_info``); ``features_only`` gives all four, NCHW. Any image size runs
(a multiple of 32 keeps every level's map whole).

The official layout (facebookresearch/ConvNeXt and DINOv3's ``convnext_*`` files) is mapped key by key
(:func:`official_to_timm`).
"""
from __future__ import annotations

import re
from typing import Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers import ACT_LAYERS
from vision_attn.layers.convnext_block import ConvNeXtStage, LayerNorm2d
from vision_attn.layers.norm_head import NormPoolHead
from vision_attn.models.contract import NormPoolClassifier, TimmContract, init_trunc_normal, run_blocks
from vision_attn.models.pretrained_cfg import data_cfg
from vision_attn.models.registry import register_model

__all__ = ["ConvNeXt", "official_to_timm"]


class ConvNeXt(NormPoolClassifier, TimmContract, nn.Module):
    """Images (B, C, H, W) -> logits (B, num_classes); ``num_classes=0``: the pooled, normalised
    features (B, dims[-1]). ``conv_mlp``: the blocks' norm and MLP on 1x1 convolutions (timm's atto to
    nano); ``ls_init_value``: the layer scale's initial value (None: none); ``norm_eps`` every norm's
    epsilon; ``img_size`` is accepted (the input configuration's size) and changes nothing."""

    output_fmts = ("NCHW",)
    classifier_keys = ("head.fc.weight", "head.fc.bias")

    def __init__(self, *, depths: Sequence[int] = (3, 3, 9, 3), dims: Sequence[int] = (96, 192, 384, 768),
                 in_chans: int = 3, num_classes: int = 1000, global_pool: str = "avg", patch_size: int = 4,
                 kernel_size: int = 7, mlp_ratio: float = 4.0, ls_init_value: float | None = 1e-6,
                 conv_mlp: bool = False, norm_eps: float = 1e-6, act_layer: str | type[nn.Module] = "gelu",
                 drop_rate: float = 0.0, drop_path_rate: float = 0.0,
                 img_size: int | tuple[int, int] | None = None) -> None:
        super().__init__()
        if len(depths) != 4 or len(dims) != 4:
            raise ConfigError(f"ConvNeXt has four stages: got depths={tuple(depths)}, dims={tuple(dims)}")
        if isinstance(act_layer, str):
            if act_layer not in ACT_LAYERS:
                raise ConfigError(f"act_layer={act_layer!r} is not a known activation: choose one of {sorted(ACT_LAYERS)}")
            act_layer = ACT_LAYERS[act_layer]
        self.num_classes = num_classes
        self.num_features = dims[-1]
        self.stem = nn.Sequential(nn.Conv2d(in_chans, dims[0], patch_size, stride=patch_size),
                                  LayerNorm2d(dims[0], eps=norm_eps))
        rates = torch.linspace(0, drop_path_rate, sum(depths), device="cpu").split(list(depths))
        self.stages = nn.Sequential(*(
            ConvNeXtStage(dims[i - 1] if i else dims[0], dims[i], depths[i], downsample=i > 0,
                          kernel_size=kernel_size, mlp_ratio=mlp_ratio, ls_init_value=ls_init_value,
                          conv_mlp=conv_mlp, norm_eps=norm_eps, act_layer=act_layer, drop_path=rates[i].tolist())
            for i in range(4)))
        self.head = NormPoolHead(dims[-1], num_classes, global_pool, norm_eps=norm_eps, drop_rate=drop_rate)
        self.grad_checkpointing = False
        self.feature_info = [dict(num_chs=dims[i], reduction=patch_size * 2**i, module=f"stages.{i}") for i in range(4)]
        self.init_weights()

    def init_weights(self) -> None:
        """timm's: truncated normal (std 0.02) for convolutions and linear layers, zero biases."""
        init_trunc_normal(self)

    def no_weight_decay(self) -> set[str]:
        return set()

    # ---------------------------------------------------------------- timm's contract: four stages
    def _levels(self) -> nn.Sequential:
        return self.stages

    def _begin(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return self.stem(x), None

    def _run_level(self, i: int, x: torch.Tensor, context: None) -> torch.Tensor:
        stage = self.stages[i]
        return run_blocks(self, stage.blocks, stage.downsample(x))

    def _feature_map(self, i: int, x: torch.Tensor, context: None, norm: bool, output_fmt: str) -> torch.Tensor:
        return x

    def _end(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def _truncate(self, last: int) -> None:
        self.stages = self.stages[: last + 1]

    def _prune_norm(self) -> None:
        """No norm follows the last stage (the head's norm goes with the head)."""

    def _prune_head(self) -> None:
        """The classifier, the pooling and the head's norm go (timm's ``reset_classifier(0, '',
        reset_other=True)``): the model returns the last map."""
        self.reset_classifier(0, "")
        self.head.norm = nn.Identity()

    # ---------------------------------------------------------------- checkpoints
    def convert_checkpoint(self, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """timm's keys as they are; the official layout mapped (:func:`official_to_timm`)."""
        if "stem.0.weight" not in state_dict and "downsample_layers.0.0.weight" in state_dict:
            return official_to_timm(state_dict, conv_mlp=self.stages[0].blocks[0].conv_mlp)
        return dict(state_dict)


# ------------------------------------------------------------------------------------------------
# The official layout (github.com/facebookresearch/ConvNeXt models/convnext.py; DINOv3's
# dinov3/models/convnext.py and its convnext_{tiny,small,base,large} files), mapped key by key:
#   downsample_layers.0.{0,1}            -> stem.{0,1} (conv, LayerNorm)
#   downsample_layers.{i}.{0,1}, i > 0   -> stages.{i}.downsample.{0,1} (LayerNorm, conv)
#   stages.{i}.{j}.dwconv / norm / pwconv1 / pwconv2 / gamma
#                                        -> stages.{i}.blocks.{j}.conv_dw / norm / mlp.fc1 / mlp.fc2 / gamma
#                                           (the linear weights reshaped to 1x1 convolutions for conv_mlp)
#   norm (the final LayerNorm on the pooled features) -> head.norm;  head -> head.fc
# DINOv3's EUPE files add distillation projectors and feature norms (projectors.*, norms.*): dropped.
_OFFICIAL = [(re.compile(r"^downsample_layers\.0\."), "stem."),
             (re.compile(r"^downsample_layers\.(\d+)\."), r"stages.\1.downsample."),
             (re.compile(r"^stages\.(\d+)\.(\d+)\."), r"stages.\1.blocks.\2."),
             (re.compile(r"\.dwconv\."), ".conv_dw."), (re.compile(r"\.pwconv([12])\."), r".mlp.fc\1."),
             (re.compile(r"^head\."), "head.fc."), (re.compile(r"^norm\."), "head.norm.")]  # in this order


def official_to_timm(state_dict: dict[str, torch.Tensor], conv_mlp: bool = False) -> dict[str, torch.Tensor]:
    """Map an official ConvNeXt / DINOv3 ConvNeXt state dict to timm's (and our) keys (see above)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key.startswith(("projectors.", "norms.")):
            continue
        new = key
        for pattern, repl in _OFFICIAL:
            new = pattern.sub(repl, new)
        if conv_mlp and ".mlp.fc" in new and new.endswith(".weight") and value.ndim == 2:
            value = value[:, :, None, None]
        out[new] = value
    return out


# ------------------------------------------------------------------------------------------------
# Variants, timm's configurations; the input configuration of timm's default weights for each name
_SMALL_CFG = data_cfg(224, crop_pct=0.875, fixed_input_size=False, first_conv="stem.0", test_img_size=288,
                      test_crop_pct=0.95)
_12K_CFG = data_cfg(224, crop_pct=0.95, fixed_input_size=False, first_conv="stem.0", test_img_size=288,
                    test_crop_pct=1.0)
_22K_CFG = data_cfg(224, crop_pct=0.875, fixed_input_size=False, first_conv="stem.0", test_img_size=288,
                    test_crop_pct=1.0)


def convnext(depths: Sequence[int], dims: Sequence[int], kwargs: dict, conv_mlp: bool = False) -> ConvNeXt:
    return ConvNeXt(**{"depths": depths, "dims": dims, "conv_mlp": conv_mlp, **kwargs})


@register_model(cfg=_SMALL_CFG)
def convnext_atto(**kwargs) -> ConvNeXt:
    """ConvNeXt-Atto (timm's, 3.7 M parameters): 1x1-convolution MLPs."""
    return convnext((2, 2, 6, 2), (40, 80, 160, 320), kwargs, conv_mlp=True)


@register_model(cfg=_SMALL_CFG)
def convnext_femto(**kwargs) -> ConvNeXt:
    """ConvNeXt-Femto (timm's, 5.2 M)."""
    return convnext((2, 2, 6, 2), (48, 96, 192, 384), kwargs, conv_mlp=True)


@register_model(cfg=_SMALL_CFG)
def convnext_pico(**kwargs) -> ConvNeXt:
    """ConvNeXt-Pico (timm's, 9.0 M)."""
    return convnext((2, 2, 6, 2), (64, 128, 256, 512), kwargs, conv_mlp=True)


@register_model(cfg=_12K_CFG)
def convnext_nano(**kwargs) -> ConvNeXt:
    """ConvNeXt-Nano (timm's, 15.6 M)."""
    return convnext((2, 2, 8, 2), (80, 160, 320, 640), kwargs, conv_mlp=True)


@register_model(cfg=_12K_CFG)
def convnext_tiny(**kwargs) -> ConvNeXt:
    """ConvNeXt-T (28.6 M); DINOv3's distilled ConvNeXt-T loads here."""
    return convnext((3, 3, 9, 3), (96, 192, 384, 768), kwargs)


@register_model(cfg=_12K_CFG)
def convnext_small(**kwargs) -> ConvNeXt:
    """ConvNeXt-S (50.2 M); DINOv3's distilled ConvNeXt-S loads here."""
    return convnext((3, 3, 27, 3), (96, 192, 384, 768), kwargs)


@register_model(cfg=_22K_CFG)
def convnext_base(**kwargs) -> ConvNeXt:
    """ConvNeXt-B (88.6 M); DINOv3's distilled ConvNeXt-B loads here."""
    return convnext((3, 3, 27, 3), (128, 256, 512, 1024), kwargs)


@register_model(cfg=_22K_CFG)
def convnext_large(**kwargs) -> ConvNeXt:
    """ConvNeXt-L (198 M); DINOv3's distilled ConvNeXt-L loads here."""
    return convnext((3, 3, 27, 3), (192, 384, 768, 1536), kwargs)
