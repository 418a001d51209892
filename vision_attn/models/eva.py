"""EVA-02 (Fang et al. 2023) under timm's names: small registered functions over
:class:`~vision_attn.models.vit.VisionTransformer`, with timm's configurations and keys (timm's
files load as they are, no key is renamed).

What EVA-02 adds to a ViT, each a named option over our layers:

- a learned position table *and* a 2D rotary embedding (``pos_embed="learn_rope"``:
  :class:`~vision_attn.layers.eva_rope.RopeEva`, channels rotated in interleaved pairs, positions
  scaled to the pre-training grid ``rope_ref_grid`` = 16x16, 224 px / 14, as timm's ``ref_feat_shape``);
- attention without a key bias (:class:`~vision_attn.layers.eva_attention.EvaAttention`): fused
  ``qkv`` with ``q_bias`` / ``v_bias`` (tiny, small) or separate ``q_proj`` / ``k_proj`` / ``v_proj``
  (base: ``qkv_fused=False``);
- a SwiGLU feed-forward: packed (``ffn_layer="swiglu"``, timm's ``GluMlp``: ``fc1`` of two halves,
  gate first; tiny and small) or with a sub-LN before its output projection (``"swiglu_norm"``:
  ``fc1_g``, ``fc1_x``, ``norm``, ``fc2``, timm's ``SwiGLU`` with ``scale_mlp``; base), each branch
  ``int(D * 8/3)`` wide, SiLU;
- the mean of the patch tokens pooled, then ``fc_norm`` (no final ``norm``), LayerNorm eps 1e-6;
  no classifier by default (``num_classes=0``: timm's, as the MIM-pretrained weights have none).

timm's ``k_bias`` (a zero buffer) and its rotary tables are not in its state dicts; nothing is
mapped. At other image sizes the position table is resampled as timm's ``dynamic_img_size`` does
(antialiased bicubic) and the rotary tables are built for the grid (scaled to 16x16).
"""
from __future__ import annotations

import functools
from typing import Any

from vision_attn.layers.eva_attention import EvaAttention
from vision_attn.layers.mlp import mlp_ratio_for
from vision_attn.models.clip import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from vision_attn.models.pretrained_cfg import data_cfg
from vision_attn.models.registry import register_model
from vision_attn.models.vit import VisionTransformer

__all__: list[str] = []

_EVA02 = dict(patch_size=14, img_size=224, depth=12, pos_embed="learn_rope", rope_ref_grid=(16, 16),
              global_pool="avg", num_classes=0, act_layer="silu")
_CFG = data_cfg(224, crop_pct=0.9, mean=OPENAI_CLIP_MEAN, std=OPENAI_CLIP_STD)  # timm's .mim_in22k weights


def _eva02(dim: int, heads: int, sub_ln: bool, kwargs: dict[str, Any]) -> VisionTransformer:
    hidden = int(dim * 4 * 2 / 3)  # each SwiGLU branch, as timm computes it
    if sub_ln:  # base: separate q/k/v, SwiGLU with sub-LN
        ffn = dict(ffn_layer="swiglu_norm", mlp_ratio=mlp_ratio_for(hidden, dim),
                   attn_class=functools.partial(EvaAttention, qkv_fused=False))
    else:  # tiny, small: fused qkv, packed SwiGLU
        ffn = dict(ffn_layer="swiglu", mlp_ratio=mlp_ratio_for(2 * hidden, dim), attn_class=EvaAttention)
    return VisionTransformer(**{**_EVA02, "embed_dim": dim, "num_heads": heads, **ffn, **kwargs})


@register_model(cfg=_CFG)
def eva02_tiny_patch14_224(**kwargs) -> VisionTransformer:
    """EVA-02 Ti/14 at 224 px (5.5 M parameters)."""
    return _eva02(192, 3, False, kwargs)


@register_model(cfg=_CFG)
def eva02_small_patch14_224(**kwargs) -> VisionTransformer:
    """EVA-02 S/14 at 224 px (21.6 M)."""
    return _eva02(384, 6, False, kwargs)


@register_model(cfg=_CFG)
def eva02_base_patch14_224(**kwargs) -> VisionTransformer:
    """EVA-02 B/14 at 224 px (85.8 M): separate q/k/v projections, SwiGLU with sub-LN."""
    return _eva02(768, 12, True, kwargs)
