"""Swin Transformer V2 (Liu et al. 2022): Swin with scaled cosine attention, a continuous position
bias, residual post-norm and patch merging that normalises after projecting.

:class:`SwinTransformerV2` is :class:`~vision_attn.models.swin.SwinTransformer` with three injected
classes, :class:`~vision_attn.layers.swin_block.SwinV2Block`,
:class:`~vision_attn.layers.patch_merging.PatchMergingV2` and
:class:`~vision_attn.layers.cosine_window_attention.CosineWindowAttention` (one per stage, with that
stage's pretrained window size); everything else (any input size, the two window rules, stage feature
maps, attention maps, ONNX export) is Swin V1's. Variants are registered under timm's names
(``swinv2_tiny_window8_256``, ...; timm's window rule) and torchvision's (``swin_v2_t/s/b``;
torchvision's rule and its single ``qkv.bias``, so that parameter counts equal torchvision's).

Checkpoints: timm files load as they are (the keys are timm's); the official layout
(github.com/microsoft/Swin-Transformer, models/swin_transformer_v2.py) and torchvision's are mapped
by :func:`~vision_attn.models.swin.official_to_timm` and :func:`~vision_attn.models.swin.torchvision_to_timm`
(layouts documented there), then the query/value biases are fitted to the model's attention class
(:func:`fit_qkv_bias`, documented below).
"""
from __future__ import annotations

import functools
import re
from typing import Literal, Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers.cosine_window_attention import CosineWindowAttention, TorchvisionCosineWindowAttention
from vision_attn.layers.patch_merging import PatchMergingV2
from vision_attn.layers.swin_block import SwinV2Block, WindowRule
from vision_attn.models.pretrained_cfg import data_cfg
from vision_attn.models.registry import register_model
from vision_attn.models.swin import SwinTransformer

__all__ = ["SwinTransformerV2", "fit_qkv_bias"]


class SwinTransformerV2(SwinTransformer):
    """Swin V2 classifier: patch embedding (+ norm), four stages of post-norm cosine-attention
    blocks, norm, average pool, head; images (B, C, H, W) of any size -> logits (B, num_classes).

    ``pretrained_window_sizes``: per stage, the window the position-bias MLP was trained at (0: the
    stage's own window); it only rescales the MLP's input coordinates. ``attn_layer``:
    :class:`CosineWindowAttention` (timm's and the official ``q_bias``/``v_bias``) or
    :class:`TorchvisionCosineWindowAttention` (torchvision's ``qkv.bias``). The other arguments are
    :class:`SwinTransformer`'s.
    """

    def __init__(
        self,
        *,
        img_size: int | tuple[int, int] = 256,
        window_size: int | tuple[int, int] = 8,
        pretrained_window_sizes: Sequence[int] = (0, 0, 0, 0),
        attn_layer: type[CosineWindowAttention] = CosineWindowAttention,
        window_rule: Literal["timm", "torchvision"] | WindowRule = "timm",
        **kwargs,
    ) -> None:
        depths = kwargs.get("depths", (2, 2, 6, 2))
        if len(pretrained_window_sizes) != len(depths):
            raise ConfigError(f"pretrained_window_sizes {tuple(pretrained_window_sizes)}: give one per stage "
                              f"({len(depths)} stages; 0 where the stage was trained at its own window)")
        attn_layers = [functools.partial(attn_layer, pretrained_window_size=p) for p in pretrained_window_sizes]
        super().__init__(img_size=img_size, window_size=window_size, window_rule=window_rule, block_layer=SwinV2Block,
                         merge_layer=PatchMergingV2, attn_layer=attn_layers, **kwargs)

    def init_weights(self) -> None:
        """Truncated normal (std 0.02) for every linear layer, the bias MLP's included; zero biases;
        logit scales log(10); the post-norms of every block start at zero (weight and bias), as in
        timm and the official code, so that each block starts as the identity."""
        super().init_weights()
        for m in self.modules():
            if isinstance(m, SwinV2Block):
                for norm in (m.norm1, m.norm2):
                    nn.init.zeros_(norm.weight)
                    nn.init.zeros_(norm.bias)

    def no_weight_decay(self) -> set[str]:
        """The bias MLPs and the logit scales (timm's choice)."""
        return {n for n, _ in self.named_parameters() if "cpb_mlp" in n or "logit_scale" in n}

    def convert_checkpoint(self, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Recognise a timm/vision_attn, torchvision or official state dict, map it to our keys, and
        fit the query/value biases to this model's attention class."""
        return fit_qkv_bias(self, super().convert_checkpoint(state_dict))


# ------------------------------------------------------------------------------------------------
# Query/value biases. timm and the official code keep ``attn.q_bias`` and ``attn.v_bias`` (C each);
# torchvision keeps ``attn.qkv.bias`` (3C) and zeroes its key third in every forward pass. So:
#   file qkv.bias (3C), model q_bias/v_bias  -> q_bias = qkv.bias[:C], v_bias = qkv.bias[2C:]
#   file q_bias/v_bias, model qkv.bias (3C)  -> qkv.bias = [q_bias, 0, v_bias]
# Either way the outputs are the same; a layout the model already has passes unchanged.
_QKV_BIAS = re.compile(r"^(.*\.attn)\.qkv\.bias$")
_Q_BIAS = re.compile(r"^(.*\.attn)\.q_bias$")


def fit_qkv_bias(model: nn.Module, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map between the two layouts of Swin V2's query/value biases (see above) where ``state_dict``
    and ``model`` differ; other keys pass unchanged."""
    own = set(model.state_dict())
    out = dict(state_dict)
    for key in list(state_dict):
        m = _QKV_BIAS.match(key)
        if m and key not in own and f"{m.group(1)}.q_bias" in own:
            bias = out.pop(key)
            C = bias.shape[0] // 3
            out[f"{m.group(1)}.q_bias"], out[f"{m.group(1)}.v_bias"] = bias[:C], bias[2 * C:]
            continue
        m = _Q_BIAS.match(key)
        if m and key not in own and f"{m.group(1)}.qkv.bias" in own and f"{m.group(1)}.v_bias" in out:
            q, v = out.pop(key), out.pop(f"{m.group(1)}.v_bias")
            out[f"{m.group(1)}.qkv.bias"] = torch.cat([q, torch.zeros_like(q), v])
    return out


# ------------------------------------------------------------------------------------------------
# Variants (timm's configurations; torchvision's for its names). Keyword arguments override them.
def _swinv2(config: dict, kwargs: dict) -> SwinTransformerV2:
    return SwinTransformerV2(**{**config, **kwargs})


_TINY = dict(embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24))
_SMALL = dict(embed_dim=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24))
_BASE = dict(embed_dim=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32))
_TV = dict(window_size=8, window_rule="torchvision", attn_layer=TorchvisionCosineWindowAttention)

# Input configurations (vision_attn.models.pretrained_cfg): timm's default weights under timm's names,
# torchvision's IMAGENET1K_V1 weights under torchvision's
_CFG_256 = data_cfg(256, crop_pct=0.9)


@register_model(cfg=_CFG_256)
def swinv2_tiny_window8_256(**kwargs) -> SwinTransformerV2:
    """Swin V2-T, 8x8 windows at 256 px (28.3 M parameters, 5.96 GMACs); timm's window rule."""
    return _swinv2({**_TINY, "window_size": 8}, kwargs)


@register_model(cfg=_CFG_256)
def swinv2_tiny_window16_256(**kwargs) -> SwinTransformerV2:
    """Swin V2-T, 16x16 windows at 256 px (6.68 GMACs)."""
    return _swinv2({**_TINY, "window_size": 16}, kwargs)


@register_model(cfg=_CFG_256)
def swinv2_small_window8_256(**kwargs) -> SwinTransformerV2:
    """Swin V2-S, 8x8 windows at 256 px (49.7 M)."""
    return _swinv2({**_SMALL, "window_size": 8}, kwargs)


@register_model(cfg=_CFG_256)
def swinv2_small_window16_256(**kwargs) -> SwinTransformerV2:
    """Swin V2-S, 16x16 windows at 256 px (49.7 M, 12.8 GMACs)."""
    return _swinv2({**_SMALL, "window_size": 16}, kwargs)


@register_model(cfg=_CFG_256)
def swinv2_base_window8_256(**kwargs) -> SwinTransformerV2:
    """Swin V2-B, 8x8 windows at 256 px (87.9 M)."""
    return _swinv2({**_BASE, "window_size": 8}, kwargs)


@register_model(cfg=_CFG_256)
def swinv2_base_window16_256(**kwargs) -> SwinTransformerV2:
    """Swin V2-B, 16x16 windows at 256 px (87.9 M)."""
    return _swinv2({**_BASE, "window_size": 16}, kwargs)


@register_model(cfg=_CFG_256)
def swinv2_base_window12to16_192to256(**kwargs) -> SwinTransformerV2:
    """Swin V2-B pre-trained with 12x12 windows at 192 px, fine-tuned with 16x16 at 256 px."""
    return _swinv2({**_BASE, "window_size": 16, "pretrained_window_sizes": (12, 12, 12, 6)}, kwargs)


@register_model(cfg=data_cfg(384, crop_pct=1.0))
def swinv2_base_window12to24_192to384(**kwargs) -> SwinTransformerV2:
    """Swin V2-B pre-trained with 12x12 windows at 192 px, fine-tuned with 24x24 at 384 px."""
    return _swinv2({**_BASE, "window_size": 24, "img_size": 384, "pretrained_window_sizes": (12, 12, 12, 6)}, kwargs)


@register_model(cfg=data_cfg(256, crop_pct=256 / 260))
def swin_v2_t(**kwargs) -> SwinTransformerV2:
    """torchvision's Swin V2-T (28.4 M, 5.94 GMACs at 256 px): torchvision's window rule, stochastic depth 0.2."""
    return _swinv2({**_TINY, **_TV, "drop_path_rate": 0.2}, kwargs)


@register_model(cfg=data_cfg(256, crop_pct=256 / 260))
def swin_v2_s(**kwargs) -> SwinTransformerV2:
    """torchvision's Swin V2-S: stochastic depth 0.3."""
    return _swinv2({**_SMALL, **_TV, "drop_path_rate": 0.3}, kwargs)


@register_model(cfg=data_cfg(256, crop_pct=256 / 272))
def swin_v2_b(**kwargs) -> SwinTransformerV2:
    """torchvision's Swin V2-B: stochastic depth 0.5."""
    return _swinv2({**_BASE, **_TV, "drop_path_rate": 0.5}, kwargs)
