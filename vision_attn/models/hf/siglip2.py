"""``transformers``' SigLIP 2 vision towers (``siglip2``) as vision_attn's ``VisionTransformer``, read only.

The families registered here (``config.json`` ``model_type``):

- ``siglip2_vision_model``: ``Siglip2VisionModel`` -> ``naflexvit_base_patch16_siglip`` (timm's name;
  ``naflexvit_so400m_patch16_siglip`` at width 1152), at the folder's sizes; the model returns
  ``pooler_output`` (``vision_use_head=False``: the mean of the normalised tokens).
- ``siglip2``: ``Siglip2Model`` (its ``vision_config``); the text tower, ``logit_scale`` and
  ``logit_bias`` are dropped.

The tower is SigLIP's (hf/clip.py maps the blocks, the final norm and the attention-pooling head by the
same names) but for its embeddings:

- ``embeddings.patch_embedding`` is a Linear (D, P*P*C) over patches flattened in (row, column,
  channel) order -> our patch convolution ``patch_embed.proj`` (D, C, P, P): the same weights
  rearranged, so images (B, C, H, W) and NaFlex patch sequences
  (:class:`~vision_attn.data.naflex.NaFlexBatch`) both run.
- ``embeddings.position_embedding.weight`` (num_patches, D) is a square table of
  sqrt(num_patches) per side (``pos_embed_grid``), resampled to each image's own grid bilinearly with
  antialiasing (``pos_embed_interp="siglip2"``), as transformers does for every input, the padding of a
  sequence taking the first position.

``Siglip2ForImageClassification`` (a ``classifier`` over the mean of the tokens) is refused naming
the key, as SigLIP's.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from vision_attn.errors import CheckpointError
from vision_attn.io.state_dict import StateDict
from vision_attn.models.hf.clip import (
    _SIGLIP_DEFAULTS,
    _SIGLIP_TOP,
    _refuse_classifier,
    _to_ours,
    _tower_args,
)
from vision_attn.models.hf.family import Config, Family, register_family
from vision_attn.layers.naflex_batch import linear_to_conv_patches

__all__ = ["SIGLIP2"]

_DEFAULTS = {k: v for k, v in _SIGLIP_DEFAULTS.items() if k != "image_size"} | dict(num_patches=256)


def _vision(config: Config) -> dict[str, Any]:
    if config.get("model_type") == "siglip2":
        vision = config.get("vision_config") or {}
        if not isinstance(vision, Mapping):
            raise CheckpointError(f"transformers siglip2 config: vision_config is {vision!r}, not a dict of the "
                                  "vision tower's settings")
    else:
        vision = config
    vision = {**_DEFAULTS, **vision}
    side = math.isqrt(vision["num_patches"]) if isinstance(vision["num_patches"], int) else 0
    if side < 1 or side * side != vision["num_patches"]:
        raise CheckpointError(f"transformers SigLIP 2 config: num_patches={vision['num_patches']!r} is not a square "
                              f"number (the position table is square)")
    patch = vision["patch_size"]
    return dict(vision, image_size=side * patch if isinstance(patch, int) else patch)


def _args(config: Config, state_dict: StateDict) -> tuple[str, dict[str, Any]]:
    vision = _vision(config)
    _refuse_classifier(state_dict, "SigLIP 2")
    args = dict(_tower_args(vision), pos_embed_interp="siglip2")
    name = "naflexvit_so400m_patch16_siglip" if args["embed_dim"] == 1152 else "naflexvit_base_patch16_siglip"
    pool = dict(global_pool="map") if vision["vision_use_head"] else dict(global_pool="avg", fc_norm=False)
    return name, dict(args, **pool, class_token=False, pre_norm=False, patch_bias=True, num_classes=0)


def _to_siglip2(state_dict: StateDict, config: Config) -> StateDict:
    out = _to_ours(state_dict, _SIGLIP_TOP, "SigLIP 2")
    weight = out.pop("patch_embed.proj.weight", None)
    if weight is not None and weight.dim() == 2:  # the Linear (D, P*P*C)
        out["patch_embed.proj.weight"] = linear_to_conv_patches(weight, _vision(config)["num_channels"],
                                                                "transformers SigLIP 2 checkpoint")
    elif weight is not None:
        out["patch_embed.proj.weight"] = weight
    return out


SIGLIP2 = register_family(Family(("siglip2_vision_model", "siglip2"), _args, _to_siglip2, None,
                                 "SigLIP 2 image towers, NaFlex included (Siglip2VisionModel, Siglip2Model's vision half)"))
