"""DINOv3 ViTs (Siméoni et al. 2025) under timm's names: small registered functions over
:class:`~vision_attn.models.vit.VisionTransformer`, with timm 1.0.31's configurations and keys (timm's
files load as they are, no key is renamed; transformers' ``dinov3_vit`` folders map in
:mod:`vision_attn.models.hf.dinov3`).

What DINOv3 adds to a ViT, each a named option over our layers:

- DINOv3's rotary position embedding (``pos_embed="rope_dinov3"``:
  :class:`~vision_attn.layers.rope_dinov3.RopeDinov3`, patch centres in [-1, 1], periods
  ``100 ** (i / n)``) and no learned table; rotate-half channel pairs
  (:class:`~vision_attn.layers.eva_attention.EvaAttention` with ``rotate_half=True``); its
  training-time coordinate augmentation is there as ``rope_shift`` / ``rope_jitter`` / ``rope_rescale``,
  off by default as in timm's models;
- a class token and 4 register ("storage") tokens, none of them rotated;
- LayerScale 1e-5 as the block's ``gamma_1`` / ``gamma_2`` (``block="pre_gamma"``), LayerNorm eps 1e-5;
- query and value biases without a key bias (``_qkvb`` names: ``q_bias``, ``v_bias``) or no qkv bias;
- a GELU MLP, or for the "plus" and 7B models a SwiGLU with separate gate and value projections
  (``ffn_layer="swiglu_split"``: ``fc1_g``, ``fc1_x``, ``fc2``, SiLU, each branch ``int(D * mlp_ratio)``
  wide rounded up to timm's ``swiglu_align_to``);
- timm's pooling: the mean of the patch tokens after the final norm (``global_pool="avg"``, no
  ``fc_norm``); upstream DINOv3 reads the class token (``global_pool="token"``); no classifier
  (``num_classes=0``).

Every image size that is a multiple of 16 runs: the rotary tables are built for the grid (nothing to
resample), the same in timm and transformers.
"""
from __future__ import annotations

import functools
from typing import Any

from vision_attn.layers.eva_attention import EvaAttention
from vision_attn.layers.mlp import mlp_ratio_for
from vision_attn.models.pretrained_cfg import data_cfg
from vision_attn.models.registry import register_model
from vision_attn.models.vit import VisionTransformer

__all__ = ["dinov3_vit"]

_DINOV3 = dict(patch_size=16, img_size=224, pos_embed="rope_dinov3", rope_temperature=100.0, reg_tokens=4,
               init_values=1e-5, block="pre_gamma", norm_eps=1e-5, global_pool="avg", fc_norm=False, num_classes=0)
_CFG = data_cfg(256, crop_pct=1.0)  # timm's .lvd1689m weights


def dinov3_vit(config: dict[str, Any], kwargs: dict[str, Any]) -> VisionTransformer:
    """A DINOv3 ViT: ``config`` (``embed_dim``, ``depth``, ``num_heads``, ``qkv_bias``; ``swiglu_ratio``:
    a SwiGLU feed-forward whose branches are ``int(embed_dim * ratio)`` wide rounded up to
    ``swiglu_align``, timm's ``swiglu_align_to``; else a GELU MLP 4x), overridden by ``kwargs``."""
    args = {**_DINOV3, "attn_class": functools.partial(EvaAttention, rotate_half=True), **config, **kwargs}
    ratio, align = args.pop("swiglu_ratio", None), args.pop("swiglu_align", 8)
    if ratio is not None and "ffn_layer" not in kwargs:
        hidden = int(args["embed_dim"] * ratio)
        hidden += -hidden % align
        args.update(ffn_layer="swiglu_split", mlp_ratio=mlp_ratio_for(hidden, args["embed_dim"]), act_layer="silu")
    return VisionTransformer(**args)


_S = dict(embed_dim=384, depth=12, num_heads=6)
_B = dict(embed_dim=768, depth=12, num_heads=12)
_L = dict(embed_dim=1024, depth=24, num_heads=16)
_HP = dict(embed_dim=1280, depth=32, num_heads=20, swiglu_ratio=4.0)
_PLUS = dict(swiglu_ratio=4.0)
_QKVB, _NO_QKVB = dict(qkv_bias=True), dict(qkv_bias=False)


@register_model(cfg=_CFG)
def vit_tiny_patch16_dinov3_qkvb(**kwargs) -> VisionTransformer:
    """DINOv3-style Ti/16 with q/v biases (EUPE's distilled weights; 5.6 M parameters)."""
    return dinov3_vit(dict(embed_dim=192, depth=12, num_heads=3, **_QKVB), kwargs)


@register_model(cfg=_CFG)
def vit_small_patch16_dinov3(**kwargs) -> VisionTransformer:
    """DINOv3 S/16 (21.6 M)."""
    return dinov3_vit({**_S, **_NO_QKVB}, kwargs)


@register_model(cfg=_CFG)
def vit_small_patch16_dinov3_qkvb(**kwargs) -> VisionTransformer:
    """DINOv3 S/16 with q/v biases."""
    return dinov3_vit({**_S, **_QKVB}, kwargs)


@register_model(cfg=_CFG)
def vit_small_plus_patch16_dinov3(**kwargs) -> VisionTransformer:
    """DINOv3 S+/16: SwiGLU feed-forward (28.7 M)."""
    return dinov3_vit({**_S, **_PLUS, **_NO_QKVB}, kwargs)


@register_model(cfg=_CFG)
def vit_small_plus_patch16_dinov3_qkvb(**kwargs) -> VisionTransformer:
    """DINOv3 S+/16 with q/v biases."""
    return dinov3_vit({**_S, **_PLUS, **_QKVB}, kwargs)


@register_model(cfg=_CFG)
def vit_base_patch16_dinov3(**kwargs) -> VisionTransformer:
    """DINOv3 B/16 (85.6 M)."""
    return dinov3_vit({**_B, **_NO_QKVB}, kwargs)


@register_model(cfg=_CFG)
def vit_base_patch16_dinov3_qkvb(**kwargs) -> VisionTransformer:
    """DINOv3 B/16 with q/v biases."""
    return dinov3_vit({**_B, **_QKVB}, kwargs)


@register_model(cfg=_CFG)
def vit_large_patch16_dinov3(**kwargs) -> VisionTransformer:
    """DINOv3 L/16 (303 M)."""
    return dinov3_vit({**_L, **_NO_QKVB}, kwargs)


@register_model(cfg=_CFG)
def vit_large_patch16_dinov3_qkvb(**kwargs) -> VisionTransformer:
    """DINOv3 L/16 with q/v biases."""
    return dinov3_vit({**_L, **_QKVB}, kwargs)


@register_model(cfg=_CFG)
def vit_huge_plus_patch16_dinov3(**kwargs) -> VisionTransformer:
    """DINOv3 H+/16: SwiGLU feed-forward (840 M)."""
    return dinov3_vit({**_HP, **_NO_QKVB}, kwargs)


@register_model(cfg=_CFG)
def vit_huge_plus_patch16_dinov3_qkvb(**kwargs) -> VisionTransformer:
    """DINOv3 H+/16 with q/v biases."""
    return dinov3_vit({**_HP, **_QKVB}, kwargs)


@register_model(cfg=_CFG)
def vit_7b_patch16_dinov3(**kwargs) -> VisionTransformer:
    """DINOv3 7B/16: SwiGLU feed-forward 2x, aligned to 64 (6.7 B)."""
    return dinov3_vit(dict(embed_dim=4096, depth=40, num_heads=32, swiglu_ratio=2.0, swiglu_align=64, **_NO_QKVB), kwargs)
