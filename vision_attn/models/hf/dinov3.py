"""``transformers``' DINOv3 ViT folders (``model_type`` ``dinov3_vit``: ``DINOv3ViTModel``, and
``DINOv3ViTBackbone``'s weights) as vision_attn's DINOv3 ViTs (:mod:`vision_attn.models.dinov3`,
timm's keys). Read only: no ``from_ours``.

Keys, transformers 5.x (4.x files have ``layer.{i}`` where 5.x has ``model.layer.{i}``, renamed as
transformers' ``conversion_mapping.py`` does):

- ``embeddings.cls_token``, ``embeddings.register_tokens`` (none when ``num_register_tokens`` is 0),
  ``embeddings.mask_token`` (1, 1, D) -> ``cls_token``, ``reg_token``, ``mask_token`` (1, D);
  ``embeddings.patch_embeddings`` (a conv) -> ``patch_embed.proj``; ``norm`` -> ``norm``;
- per block ``model.layer.{i}.``: ``norm1``, ``norm2`` -> the same; ``attention.q_proj/k_proj/v_proj``
  weights -> ``attn.qkv.weight`` (packed q, k, v), their q and v biases -> ``attn.q_bias``,
  ``attn.v_bias``; ``attention.o_proj`` -> ``attn.proj``; ``layer_scale1.lambda1`` /
  ``layer_scale2.lambda1`` -> ``gamma_1`` / ``gamma_2``; ``mlp.up_proj`` / ``mlp.down_proj`` ->
  ``mlp.fc1`` / ``mlp.fc2``, or with ``use_gated_mlp`` ``mlp.gate_proj`` / ``up_proj`` / ``down_proj``
  -> ``mlp.fc1_g`` / ``fc1_x`` / ``fc2``.

The config's sizes build any size (the closest registered name gives the rest). The model computes
what ``DINOv3ViTModel`` computes: ``pooler_output`` (the normalised class token) is
``num_classes=0``'s output (``global_pool="token"``, as upstream DINOv3; timm's names pool the patch
mean), ``last_hidden_state`` is ``forward_features``. Every size runs as in transformers: the rotary
tables are built for the grid (``rope_theta`` their base period), nothing is resampled; in training
the coordinates are augmented as the config says (``pos_embed_shift``, ``pos_embed_jitter``,
``pos_embed_rescale``, 2.0 by default in transformers).

Refused with the option named (one line, the config file's path first): a key bias
(``key_bias=true``), query and value biases that differ, no bias on the output projection or the
MLP (``proj_bias`` / ``mlp_bias`` false), a head width other than hidden_size / heads: vision_attn's
DINOv3 attention (timm's) has none of these.
"""
from __future__ import annotations

from typing import Any

from vision_attn.io.state_dict import StateDict
from vision_attn.layers.mlp import mlp_ratio_for
from vision_attn.models.hf.family import Config, Family, Name, register_family
from vision_attn.models.hf.vit import _closest, _has, _Layout, _mask_token_2d, _ours, _Reader

__all__ = ["DINOV3_VIT"]

_BLOCK: dict[str, Name] = {
    "norm1": "norm1",
    "attn.qkv.weight": ("attention.q_proj.weight", "attention.k_proj.weight", "attention.v_proj.weight"),
    "attn.q_bias": "attention.q_proj.bias",
    "attn.v_bias": "attention.v_proj.bias",
    "attn.proj": "attention.o_proj",
    "gamma_1": "layer_scale1.lambda1",
    "norm2": "norm2",
    "mlp.fc1": "mlp.up_proj",
    "mlp.fc2": "mlp.down_proj",
    "gamma_2": "layer_scale2.lambda1",
}
_GATED_BLOCK: dict[str, Name] = {**{k: v for k, v in _BLOCK.items() if k != "mlp.fc1"},
                                 "mlp.fc1_g": "mlp.gate_proj", "mlp.fc1_x": "mlp.up_proj"}
_TOP: dict[str, Name] = {"cls_token": "embeddings.cls_token", "reg_token": "embeddings.register_tokens",
                         "mask_token": "embeddings.mask_token", "patch_embed.proj": "embeddings.patch_embeddings",
                         "norm": "norm"}
LAYOUT = _Layout("dinov3_vit", "", "model.layer.", _TOP, (_BLOCK,), "layer.", {}, {})
GATED_LAYOUT = _Layout("dinov3_vit", "", "model.layer.", _TOP, (_GATED_BLOCK,), "layer.", {}, {})

# DINOv3ViTConfig's defaults (transformers 5.x), for keys a config.json omits
DEFAULTS: dict[str, dict[str, Any]] = {"dinov3_vit": dict(
    patch_size=16, hidden_size=384, intermediate_size=1536, num_hidden_layers=12, num_attention_heads=6,
    hidden_act="gelu", layer_norm_eps=1e-5, rope_theta=100.0, image_size=224, num_channels=3, query_bias=True,
    key_bias=False, value_bias=True, proj_bias=True, mlp_bias=True, layerscale_value=1.0, use_gated_mlp=False,
    num_register_tokens=0, pos_embed_shift=None, pos_embed_jitter=None, pos_embed_rescale=2.0)}

_NAMES = {"vit_tiny_patch16_dinov3_qkvb": (192, 12, 16, 224), "vit_small_patch16_dinov3": (384, 12, 16, 224),
          "vit_base_patch16_dinov3": (768, 12, 16, 224), "vit_large_patch16_dinov3": (1024, 24, 16, 224),
          "vit_huge_plus_patch16_dinov3": (1280, 32, 16, 224), "vit_7b_patch16_dinov3": (4096, 40, 16, 224)}


def _optional(c: _Reader, key: str, low: float) -> float | None:
    value = c.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= low:
        raise c._bad(key, value, f"null or a number >= {low}")
    return float(value)


def _args(config: Config, state_dict: StateDict) -> tuple[str, dict[str, Any]]:
    c = _Reader(config, DEFAULTS)
    dim, heads = c.int("hidden_size"), c.int("num_attention_heads")
    if dim % heads or (dim // heads) % 4:
        raise c._bad("num_attention_heads", heads, f"a divisor of hidden_size={dim} leaving heads of a multiple of "
                     f"4 channels (the rotary embedding's)")
    if config.get("head_dim") not in (None, dim // heads):
        raise c._bad("head_dim", config.get("head_dim"), f"hidden_size / num_attention_heads = {dim // heads}")
    lacks = "which vision_attn's DINOv3 attention (timm's) does not have"
    if c.flag("key_bias"):
        raise c._bad("key_bias", True, f"false: a bias on the keys is an option {lacks}")
    if c.flag("query_bias") != c.flag("value_bias"):
        raise c._bad("query_bias", c.get("query_bias"), f"equal to value_bias={c.get('value_bias')}: one without the "
                     f"other is an option {lacks}")
    for key in ("proj_bias", "mlp_bias"):
        if not c.flag(key):
            raise c._bad(key, False, f"true: linear layers without bias are an option {lacks}")
    img, patch = c.pair("image_size"), c.pair("patch_size")
    registers = c.get("num_register_tokens")
    if isinstance(registers, bool) or not isinstance(registers, int) or registers < 0:
        raise c._bad("num_register_tokens", registers, "an integer >= 0")
    hidden = c.int("intermediate_size")
    ffn = "swiglu_split" if c.flag("use_gated_mlp") else "mlp"
    kwargs: dict[str, Any] = dict(
        img_size=img, patch_size=patch, in_chans=c.int("num_channels"), embed_dim=dim,
        depth=c.int("num_hidden_layers"), num_heads=heads, qkv_bias=c.flag("query_bias"),
        norm_eps=c.number("layer_norm_eps"), ffn_layer=ffn, mlp_ratio=mlp_ratio_for(hidden, dim), act_layer=c.act(),
        init_values=c.number("layerscale_value") or 1.0, reg_tokens=registers, class_token=True,
        rope_temperature=c.number("rope_theta"), rope_shift=_optional(c, "pos_embed_shift", 0.0),
        rope_jitter=_optional(c, "pos_embed_jitter", 1.0), rope_rescale=_optional(c, "pos_embed_rescale", 1.0),
        global_pool="token", fc_norm=False, mask_token=_has(state_dict, "embeddings.mask_token"), num_classes=0)
    return _closest(_NAMES, kwargs), kwargs


def _to_ours(state_dict: StateDict, config: Config) -> StateDict:
    gated = config.get("use_gated_mlp", DEFAULTS["dinov3_vit"]["use_gated_mlp"]) is True
    out = _mask_token_2d(_ours(state_dict, GATED_LAYOUT if gated else LAYOUT))
    if "reg_token" in out and out["reg_token"].shape[1] == 0:  # transformers keeps an empty (1, 0, D) tensor
        del out["reg_token"]
    return out


DINOV3_VIT = register_family(Family(("dinov3_vit",), _args, _to_ours, None,
                                    "DINOv3ViTModel, DINOv3ViTBackbone (read only)"))
