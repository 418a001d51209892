"""CLIP (Radford et al. 2021) and SigLIP (Zhai et al. 2023) image towers under timm's names.

Small registered functions over :class:`~vision_attn.models.vit.VisionTransformer`, with timm's
configurations, keys and default weights' input configurations (so timm's files load as they are):

- CLIP (``vit_*_clip_224``): a norm over the embedded tokens before the blocks (``pre_norm``: timm's
  ``norm_pre``, OpenAI's ``ln_pre``), a patch projection without bias, LayerNorm eps 1e-5, the class
  token pooled; the ``_quickgelu`` names use OpenAI's quick GELU (:class:`~vision_attn.layers.QuickGELU`),
  which OpenAI's and several open_clip weights were trained with. The head is timm's (a bias, that
  the OpenAI projection ``proj`` fills with zeros); OpenAI CLIP and open_clip files (a full CLIP
  state dict or its ``visual`` tower) load through :func:`~vision_attn.models.vit.openai_clip_to_timm`.
- SigLIP (``vit_*_siglip_*``): no class token, SigLIP's attention-pooling head (``global_pool="map"``:
  :class:`~vision_attn.layers.AttentionPoolLatent` as ``attn_pool``), no classifier (``num_classes=0``:
  the pooled image embedding); the ``_gap`` names pool by the mean of the patch tokens instead.
- SigLIP 2 (``naflexvit_*_patch16_siglip``, timm's NaFlex names): SigLIP's tower with GELU's tanh form,
  its 16x16 position table resampled to each image's own grid bilinearly with antialiasing
  (``pos_embed_interp="siglip2"``); besides images it takes NaFlex patch sequences with a padding mask
  (:class:`~vision_attn.data.naflex.NaFlexBatch`: each image at its own aspect ratio). timm's files
  (``embeds.proj``, a Linear over (row, column, channel) patches, and ``embeds.pos_embed`` (1, 16, 16, D))
  and transformers' ``siglip2`` folders load.
"""
from __future__ import annotations

from typing import Any

from vision_attn.models.pretrained_cfg import INCEPTION_MEAN, INCEPTION_STD, data_cfg
from vision_attn.models.registry import register_model
from vision_attn.models.vit import VisionTransformer

__all__ = ["OPENAI_CLIP_MEAN", "OPENAI_CLIP_STD"]

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
"""The mean and std OpenAI's CLIP normalises images with (and most open_clip weights after it)."""
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

_CLIP = dict(pre_norm=True, norm_eps=1e-5)
_QUICK = dict(act_layer="quick_gelu")
_SIGLIP = dict(class_token=False, global_pool="map", num_classes=0)
_SIGLIP_GAP = dict(class_token=False, global_pool="avg", fc_norm=False, num_classes=0)
_B32 = dict(patch_size=32, embed_dim=768, depth=12, num_heads=12)
_B16 = dict(patch_size=16, embed_dim=768, depth=12, num_heads=12)
_L14 = dict(patch_size=14, embed_dim=1024, depth=24, num_heads=16)


def _clip_cfg(crop_pct: float, mean=OPENAI_CLIP_MEAN, std=OPENAI_CLIP_STD, img_size: int = 224) -> dict[str, Any]:
    return data_cfg(img_size, crop_pct=crop_pct, mean=mean, std=std)


def _vit(*configs: dict, kwargs: dict) -> VisionTransformer:
    merged: dict[str, Any] = {}
    for c in configs:
        merged.update(c)
    return VisionTransformer(**{**merged, **kwargs})


# Input configurations: those of timm's default weights for each name (timm 1.0: the CLIP names'
# ImageNet fine-tunes of the LAION-2B towers; the quickgelu names' open_clip towers, whose classifier
# is the image projection: 512 or 768 wide; SigLIP's WebLI towers).
@register_model(cfg=_clip_cfg(0.9))
def vit_base_patch32_clip_224(**kwargs) -> VisionTransformer:
    """CLIP ViT-B/32 image tower (88.2 M parameters with a 1000-class head)."""
    return _vit(_B32, _CLIP, kwargs=kwargs)


@register_model(cfg=_clip_cfg(0.95))
def vit_base_patch16_clip_224(**kwargs) -> VisionTransformer:
    """CLIP ViT-B/16 image tower (86.6 M)."""
    return _vit(_B16, _CLIP, kwargs=kwargs)


@register_model(cfg=_clip_cfg(1.0, INCEPTION_MEAN, INCEPTION_STD))
def vit_large_patch14_clip_224(**kwargs) -> VisionTransformer:
    """CLIP ViT-L/14 image tower (304 M)."""
    return _vit(_L14, _CLIP, kwargs=kwargs)


@register_model(cfg=_clip_cfg(0.9))
def vit_base_patch32_clip_quickgelu_224(**kwargs) -> VisionTransformer:
    """CLIP ViT-B/32 with quick GELU (OpenAI's activation); the head is a 512-wide image projection."""
    return _vit(_B32, _CLIP, _QUICK, dict(num_classes=512), kwargs=kwargs)


@register_model(cfg=_clip_cfg(1.0))
def vit_base_patch16_clip_quickgelu_224(**kwargs) -> VisionTransformer:
    """CLIP ViT-B/16 with quick GELU; a 512-wide image projection."""
    return _vit(_B16, _CLIP, _QUICK, dict(num_classes=512), kwargs=kwargs)


@register_model(cfg=_clip_cfg(1.0))
def vit_large_patch14_clip_quickgelu_224(**kwargs) -> VisionTransformer:
    """CLIP ViT-L/14 with quick GELU; a 768-wide image projection."""
    return _vit(_L14, _CLIP, _QUICK, dict(num_classes=768), kwargs=kwargs)


@register_model(cfg=data_cfg(224, crop_pct=0.9, mean=INCEPTION_MEAN, std=INCEPTION_STD))
def vit_base_patch16_siglip_224(**kwargs) -> VisionTransformer:
    """SigLIP ViT-B/16 image tower at 224 px, attention-pooled (92.9 M)."""
    return _vit(_B16, _SIGLIP, kwargs=kwargs)


@register_model(cfg=data_cfg(256, crop_pct=0.9, mean=INCEPTION_MEAN, std=INCEPTION_STD))
def vit_base_patch16_siglip_256(**kwargs) -> VisionTransformer:
    """SigLIP ViT-B/16 image tower at 256 px, attention-pooled."""
    return _vit(_B16, _SIGLIP, dict(img_size=256), kwargs=kwargs)


@register_model(cfg=data_cfg(224, crop_pct=0.9, mean=INCEPTION_MEAN, std=INCEPTION_STD))
def vit_base_patch16_siglip_gap_224(**kwargs) -> VisionTransformer:
    """SigLIP ViT-B/16 at 224 px, pooled by the mean of the normalised patch tokens (no attention pool)."""
    return _vit(_B16, _SIGLIP_GAP, kwargs=kwargs)


_SIGLIP2 = dict(_SIGLIP, act_layer="gelu_tanh", img_size=384, pos_embed_grid=16, pos_embed_interp="siglip2")


_SIGLIP2_CFG = data_cfg(384, crop_pct=1.0, mean=INCEPTION_MEAN, std=INCEPTION_STD, fixed_input_size=False)


@register_model(cfg=_SIGLIP2_CFG)
def naflexvit_base_patch16_siglip(**kwargs) -> VisionTransformer:
    """SigLIP 2 ViT-B/16 image tower (NaFlex), attention-pooled (92.9 M)."""
    return _vit(_B16, _SIGLIP2, kwargs=kwargs)


@register_model(cfg=_SIGLIP2_CFG)
def naflexvit_so400m_patch16_siglip(**kwargs) -> VisionTransformer:
    """SigLIP 2 So400m/16 image tower (NaFlex), attention-pooled."""
    return _vit(dict(patch_size=16, embed_dim=1152, depth=27, num_heads=16, mlp_ratio=3.7362), _SIGLIP2,
                kwargs=kwargs)
