"""``transformers``' Hiera folders (``model_type`` ``hiera``: ``HieraModel``, ``HieraForImageClassification``)
as vision_attn's :class:`~vision_attn.models.hiera.Hiera` (timm's keys). Read only: no ``from_ours``.

Keys (``hiera.`` prefixed in ``HieraForImageClassification``):

- ``embeddings.patch_embeddings.projection`` -> ``patch_embed.proj``; ``embeddings.position_embeddings``
  -> ``pos_embed``;
- ``encoder.stages.{s}.layers.{j}.`` ``layernorm_before``, ``attn.qkv``, ``attn.proj``,
  ``layernorm_after``, ``mlp.fc1/fc2``, ``proj`` -> ``blocks.{n}.`` ``norm1``, ``attn.qkv``, ``attn.proj``,
  ``norm2``, ``mlp.fc1/fc2``, ``proj`` (``n`` counts the blocks of all stages in turn);
- ``pooler.layernorm`` -> ``head.norm``; ``classifier`` -> ``head.fc``.

transformers' ``pooler_output`` is the LayerNorm of the mean of the last tokens: ``num_classes=0``'s
output. The model is built for the config's ``image_size``; built for another (``img_size=``), it
computes what transformers computes there with ``interpolate_pos_encoding=True``: the position table
(the config's grid) resampled bicubically, without antialiasing, at run time. The config's ``embed_dim``, ``depths``, ``num_heads`` (doubling each stage,
as timm's Hiera), ``embed_dim_multiplier``, ``num_query_pool``, ``query_stride``, ``masked_unit_size``,
``masked_unit_attention``, ``mlp_ratio``, ``patch_*`` and ``layer_norm_eps`` build any size; the
closest timm name names it. The MAE pre-training folders (``HieraForPreTraining``: a decoder) and
``HieraBackbone``'s extra norms are refused, key by key.
"""
from __future__ import annotations

import re
from typing import Any

from vision_attn.errors import CheckpointError
from vision_attn.io.state_dict import StateDict
from vision_attn.models.hf.family import Config, Family, num_labels, register_family, strip_prefix
from vision_attn.models.hf.vit import _Reader

__all__ = ["HIERA"]

DEFAULTS: dict[str, dict[str, Any]] = {"hiera": dict(
    embed_dim=96, image_size=[224, 224], patch_size=[7, 7], patch_stride=[4, 4], patch_padding=[3, 3],
    mlp_ratio=4.0, depths=[2, 3, 16, 3], num_heads=[1, 2, 4, 8], embed_dim_multiplier=2.0, num_query_pool=3,
    query_stride=[2, 2], masked_unit_size=[8, 8], masked_unit_attention=[True, True, False, False],
    num_channels=3, hidden_act="gelu", layer_norm_eps=1e-6)}
_NAMES = {"hiera_tiny_224": (96, (1, 2, 7, 2)), "hiera_small_224": (96, (1, 2, 11, 2)),
          "hiera_base_224": (96, (2, 3, 16, 3)), "hiera_base_plus_224": (112, (2, 3, 16, 3)),
          "hiera_large_224": (144, (2, 6, 36, 4)), "hiera_huge_224": (256, (2, 6, 36, 4))}
_LAYER = {"layernorm_before": "norm1", "attn.qkv": "attn.qkv", "attn.proj": "attn.proj",
          "layernorm_after": "norm2", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2", "proj": "proj"}
_KEY = re.compile(r"^encoder\.stages\.(\d+)\.layers\.(\d+)\.(\w+(?:\.fc[12]|\.qkv|\.proj)?)\.(weight|bias)$")
_FIXED = {"embeddings.patch_embeddings.projection.weight": "patch_embed.proj.weight",
          "embeddings.patch_embeddings.projection.bias": "patch_embed.proj.bias",
          "embeddings.position_embeddings": "pos_embed",
          "pooler.layernorm.weight": "head.norm.weight", "pooler.layernorm.bias": "head.norm.bias",
          "classifier.weight": "head.fc.weight", "classifier.bias": "head.fc.bias"}


def _ints(c: _Reader, key: str, count: int | None = None) -> tuple[int, ...]:
    value = c.get(key)
    if not (isinstance(value, (list, tuple)) and (count is None or len(value) == count) and value
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise c._bad(key, value, "a list of positive integers" + (f" ({count})" if count else ""))
    return tuple(value)


def _args(config: Config, state_dict: StateDict) -> tuple[str, dict[str, Any]]:
    c = _Reader(config, DEFAULTS)
    lacks = "which vision_attn's Hiera (timm's) does not build"
    depths = _ints(c, "depths")
    heads = _ints(c, "num_heads", len(depths))
    if any(h != heads[0] * 2 ** i for i, h in enumerate(heads)):
        raise c._bad("num_heads", list(heads), f"doubling at each stage ({[heads[0] * 2 ** i for i in range(len(heads))]}): "
                     f"other head counts are an option {lacks}")
    flags = c.get("masked_unit_attention")
    if not (isinstance(flags, (list, tuple)) and len(flags) == len(depths) and all(isinstance(f, bool) for f in flags)):
        raise c._bad("masked_unit_attention", flags, f"{len(depths)} flags, one per stage")
    if any(flags[i] and not flags[i - 1] for i in range(1, len(flags))):
        raise c._bad("masked_unit_attention", list(flags), "mask-unit stages first, then global ones: a mask-unit "
                     f"stage after a global one is an option {lacks}")
    if c.get("hidden_act") != "gelu":
        raise c._bad("hidden_act", c.get("hidden_act"), f"'gelu': another activation is an option {lacks}")
    q_pool = c.get("num_query_pool")
    if isinstance(q_pool, bool) or not isinstance(q_pool, int) or not 0 <= q_pool < len(depths):
        raise c._bad("num_query_pool", q_pool, f"an integer from 0 to {len(depths) - 1}")
    dim, img, stride = c.int("embed_dim"), c.pair("image_size"), c.pair("patch_stride")
    kwargs: dict[str, Any] = dict(
        img_size=img, pos_embed_grid=(img[0] // stride[0], img[1] // stride[1]), in_chans=c.int("num_channels"), embed_dim=dim, num_heads=heads[0],
        stages=depths, q_pool=q_pool, q_stride=c.pair("query_stride"), mask_unit_size=c.pair("masked_unit_size"),
        mask_unit_attn=tuple(flags), dim_mul=c.number("embed_dim_multiplier"), head_mul=2.0,
        patch_kernel=c.pair("patch_size"), patch_stride=stride, patch_padding=_pad(c),
        mlp_ratio=c.number("mlp_ratio"), norm_eps=c.number("layer_norm_eps"),
        num_classes=num_labels(state_dict, "classifier.weight"))
    name = min(_NAMES, key=lambda n: (abs(dim - _NAMES[n][0]), abs(sum(depths) - sum(_NAMES[n][1]))))
    return name, kwargs


def _pad(c: _Reader) -> tuple[int, int]:
    value = c.get("patch_padding")
    pair = tuple(value) if isinstance(value, (list, tuple)) else (value, value)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pair):
        raise c._bad("patch_padding", value, "an integer >= 0 or a pair of them")
    return pair  # type: ignore[return-value]


def _to_ours(state_dict: StateDict, config: Config) -> StateDict:
    depths = _ints(_Reader(config, DEFAULTS), "depths")
    first = [sum(depths[:i]) for i in range(len(depths))]
    out: StateDict = {}
    for key, value in strip_prefix(state_dict, "hiera.").items():
        m = _KEY.match(key)
        if key in _FIXED:
            new = _FIXED[key]
        elif m and m.group(3) in _LAYER and int(m.group(1)) < len(depths):
            new = f"blocks.{first[int(m.group(1))] + int(m.group(2))}.{_LAYER[m.group(3)]}.{m.group(4)}"
        else:
            raise CheckpointError(f"transformers hiera checkpoint: key {key!r} has no counterpart in vision_attn's "
                                  f"Hiera (an MAE decoder or a backbone's norm?); load it with transformers")
        out[new] = value
    return out


HIERA = register_family(Family(("hiera",), _args, _to_ours, None,
                               "HieraModel, HieraForImageClassification (read only)"))
