"""``transformers``' CLIP and SigLIP vision towers as vision_attn's ``VisionTransformer`` (timm's keys), and back.

The families registered here (``config.json`` ``model_type``):

- ``clip_vision_model``: ``CLIPVisionModel`` (no head: the model returns ``pooler_output``, the
  post-normed class token) and ``CLIPVisionModelWithProjection`` (``visual_projection``, bias-free,
  -> ``head`` with ``head_bias=False``: the model returns ``image_embeds``) -> ``vit_*_clip_224`` or
  ``vit_*_clip_quickgelu_224`` (by ``hidden_act``): ``pre_layrnorm`` (sic) -> ``norm_pre``, a patch
  projection without bias, the class token pooled.
- ``clip``: ``CLIPModel`` (its ``vision_config``; the same image tower and projection:
  ``get_image_features``). The text tower (``text_model.*``, ``text_projection``) and ``logit_scale``
  are dropped: vision_attn's model is the image tower.
- ``siglip_vision_model``: ``SiglipVisionModel`` -> ``vit_base_patch16_siglip_224`` (``_256``):
  no class token, a patch projection with bias, no pre-norm, and the attention-pooling head
  (``head.probe``, ``head.attention``, ``head.layernorm``, ``head.mlp``) -> ``attn_pool``
  (``global_pool="map"``); the model returns ``pooler_output``. ``vision_use_head=False`` (no head:
  transformers returns no pooled output) builds ``vit_base_patch16_siglip_gap_224``, the mean of the
  normalised tokens.
- ``siglip``: ``SiglipModel`` (its ``vision_config``); the text tower, ``logit_scale`` and
  ``logit_bias`` are dropped.

``CLIPForImageClassification`` and ``SiglipForImageClassification`` (a ``classifier`` over the mean of
the tokens, CLIP's before its final norm) are not mapped: refused naming the key. ``hidden_act`` maps to
our activations (``quick_gelu``, ``gelu``, ``gelu_pytorch_tanh``/``gelu_new``: GELU's tanh form,
``relu``, ``silu``); another value is refused naming it.

Position tables at another image size: a model read from a folder computes what transformers
computes (with ``interpolate_pos_encoding=True``): the table stays at the folder's grid
(``pos_embed_grid``) and is resampled at run time bicubically without antialiasing
(``pos_embed_interp="transformers"``), not with timm's antialiasing.

:func:`from_ours` writes the folder the installed transformers (5.x) saves: ``CLIPVisionModel`` or
``CLIPVisionModelWithProjection`` (a head of ours without bias, or with a zero bias: the projection);
``SiglipVisionModel``.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

import torch
from torch import nn

from vision_attn.errors import CheckpointError
from vision_attn.io.state_dict import StateDict
from vision_attn.layers import Attention, AttentionPoolLatent, Block, Mlp, QuickGELU
from vision_attn.models.hf.family import Config, Family, Name, inverse_table, lookup, register_family

__all__ = ["CLIP", "SIGLIP", "clip_from_ours", "siglip_from_ours"]

# ------------------------------------------------------------------------------------------------
# Key layouts. A table maps OUR module name (its .weight/.bias follow) to transformers'; a tuple is a
# packed tensor of ours split along dim 0 into those modules, in order. The vision tower's names are
# the same in transformers 4.x and 5.x:
#   embeddings.{class_embedding (D,) (CLIP), patch_embedding, position_embedding.weight (N, D)},
#   pre_layrnorm (CLIP), encoder.layers.{i}.{layer_norm1, self_attn.q_proj/k_proj/v_proj,
#   self_attn.out_proj, layer_norm2, mlp.fc1, mlp.fc2}, post_layernorm,
#   head.{probe (1, 1, D), attention.in_proj_weight/bias (3D, D: q, k, v rows), attention.out_proj,
#   layernorm, mlp.fc1, mlp.fc2} (SigLIP)
# and the base-model prefix is what changed:
#   transformers 5.x CLIPVisionModel / SiglipVisionModel: none (conversion_mapping.py's
#     PrefixChange(prefix_to_remove="vision_model") for "CLIPVisionModel", which SiglipVisionModel shares)
#   transformers 4.x CLIPVisionModel / SiglipVisionModel, and both versions' CLIPVisionModelWithProjection,
#     CLIPModel, SiglipModel: vision_model.
# Outside the tower: visual_projection (CLIP's, no bias) -> head; text_model.*, text_projection,
# logit_scale, logit_bias: the text tower (dropped). 4.x files before 4.31 also hold the constant
# index buffer embeddings.position_ids (dropped: it is arange(N)).
_PREFIX = "vision_model."
_BLOCKS = "encoder.layers."
_BLOCK: dict[str, Name] = {
    "norm1": "layer_norm1",
    "attn.qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),  # timm packs q, k, v in this order
    "attn.proj": "self_attn.out_proj",
    "norm2": "layer_norm2",
    "mlp.fc1": "mlp.fc1",
    "mlp.fc2": "mlp.fc2",
}
_CLIP_TOP: dict[str, Name] = {
    "patch_embed.proj": "embeddings.patch_embedding",
    "norm_pre": "pre_layrnorm",  # (sic)
    "norm": "post_layernorm",
}
_SIGLIP_TOP: dict[str, Name] = {
    "patch_embed.proj": "embeddings.patch_embedding",
    "norm": "post_layernorm",
    "attn_pool.latent": "head.probe",  # a full parameter name, (1, 1, D) in both
    "attn_pool.proj": "head.attention.out_proj",
    "attn_pool.norm": "head.layernorm",
    "attn_pool.mlp.fc1": "head.mlp.fc1",
    "attn_pool.mlp.fc2": "head.mlp.fc2",
}
# reshaped: ours (1, 1, D) / (1, N, D) <-> transformers' (D,) / (N, D)
_EMBEDDINGS = {"cls_token": "embeddings.class_embedding", "pos_embed": "embeddings.position_embedding.weight"}
_INV_EMBEDDINGS = {v: k for k, v in _EMBEDDINGS.items()}
# transformers' packed in_proj of the pooling head (3D, D) = [our attn_pool.q (D, D); attn_pool.kv (2D, D)]
_POOL_IN = "head.attention.in_proj_"
_PROJECTION = "visual_projection.weight"
_TEXT_TOWER = re.compile(r"^(text_model\.|text_projection\.|logit_scale$|logit_bias$)")
_DROPPED = {"embeddings.position_ids": "a constant index buffer (arange) that 4.x files before 4.31 saved"}
_PARAMS = ("weight", "bias")
_LAYER = re.compile(r"^encoder\.layers\.(\d+)\.(.+)$")

# transformers' hidden_act -> our act_layer name (vision_attn.layers.ACT_LAYERS), and back
_HIDDEN_ACT = {"quick_gelu": "quick_gelu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
               "relu": "relu", "silu": "silu", "swish": "silu"}

# the config classes' defaults (4.x nested configs may leave out what equals them)
_CLIP_DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                      num_channels=3, image_size=224, patch_size=32, hidden_act="quick_gelu", layer_norm_eps=1e-5)
_SIGLIP_DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                        num_channels=3, image_size=224, patch_size=16, hidden_act="gelu_pytorch_tanh",
                        layer_norm_eps=1e-6, vision_use_head=True)


# ------------------------------------------------------------------------------------------------
# config.json -> constructor arguments
def _vision_config(config: Config, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The vision tower's config: the file's own (``*_vision_model``) or its ``vision_config`` (the dual
    model), over the config class's defaults."""
    if config.get("model_type") in ("clip", "siglip"):
        vision = config.get("vision_config") or {}
        if not isinstance(vision, Mapping):
            raise CheckpointError(f"transformers {config['model_type']} config: vision_config is {vision!r}, "
                                  "not a dict of the vision tower's settings")
    else:
        vision = config
    return {**defaults, **vision}


def _square(vision: Mapping[str, Any], key: str) -> int:
    value = vision[key]
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise CheckpointError(f"transformers vision config: {key}={value!r} is not a positive size "
                              "(vision_attn builds square sizes given as one integer)")
    return value


def _tower_args(vision: Mapping[str, Any]) -> dict[str, Any]:
    """The sizes every CLIP/SigLIP tower states: widths, depth, heads, MLP width, activation, norm eps."""
    act = vision["hidden_act"]
    if act not in _HIDDEN_ACT:
        raise CheckpointError(f"transformers vision config: hidden_act={act!r} is not an activation vision_attn "
                              f"has (it maps {', '.join(sorted(_HIDDEN_ACT))})")
    dim, hidden, heads = vision["hidden_size"], vision["intermediate_size"], vision["num_attention_heads"]
    mlp_ratio = hidden / dim
    if int(dim * mlp_ratio) != hidden:  # the blocks build int(dim * mlp_ratio) units: 56 * (61 / 56) is 60.99...
        mlp_ratio = (hidden + 0.5) / dim
    if int(dim * mlp_ratio) != hidden:
        raise CheckpointError(f"transformers vision config: intermediate_size={hidden} cannot be built as a "
                              f"ratio of hidden_size={dim}")
    if dim % heads:
        raise CheckpointError(f"transformers vision config: hidden_size={dim} is not divisible by "
                              f"num_attention_heads={heads}")
    img, patch = _square(vision, "image_size"), _square(vision, "patch_size")
    return dict(img_size=img, patch_size=patch,
                in_chans=vision["num_channels"], embed_dim=dim, depth=vision["num_hidden_layers"], num_heads=heads,
                mlp_ratio=mlp_ratio, act_layer=_HIDDEN_ACT[act],
                norm_eps=float(vision["layer_norm_eps"]),
                # the table stays at the folder's grid and meets other sizes as transformers' CLIP and SigLIP
                # interpolate_pos_encoding does (bicubic, no antialiasing)
                pos_embed_grid=(img // patch, img // patch), pos_embed_interp="transformers")


def _refuse_classifier(state_dict: StateDict, what: str) -> None:
    key = next((k for k in state_dict if k.startswith("classifier.")), None)
    if key is not None:
        raise CheckpointError(f"transformers {what} checkpoint: key {key!r} is the classifier of "
                              f"...ForImageClassification (over the mean of the tokens), which vision_attn does not "
                              f"map; load the base model's folder")


def _clip_args(config: Config, state_dict: StateDict) -> tuple[str, dict[str, Any]]:
    vision = _vision_config(config, _CLIP_DEFAULTS)
    _refuse_classifier(state_dict, "CLIP")
    args = _tower_args(vision)
    patch = args["patch_size"]
    base = {32: "vit_base_patch32_clip", 14: "vit_large_patch14_clip"}.get(patch, "vit_base_patch16_clip")
    name = f"{base}_quickgelu_224" if args["act_layer"] == "quick_gelu" else f"{base}_224"
    projection = state_dict.get(_PROJECTION)
    return name, dict(args, pre_norm=True, class_token=True, global_pool="token",
                      num_classes=int(projection.shape[0]) if projection is not None else 0,
                      head_bias=projection is None)  # the projection has no bias; a fresh classifier has one


def _siglip_args(config: Config, state_dict: StateDict) -> tuple[str, dict[str, Any]]:
    vision = _vision_config(config, _SIGLIP_DEFAULTS)
    _refuse_classifier(state_dict, "SigLIP")
    args = _tower_args(vision)
    if vision["vision_use_head"]:
        name = "vit_base_patch16_siglip_256" if args["img_size"] == 256 else "vit_base_patch16_siglip_224"
        pool = dict(global_pool="map")
    else:
        name, pool = "vit_base_patch16_siglip_gap_224", dict(global_pool="avg", fc_norm=False)
    return name, dict(args, **pool, class_token=False, pre_norm=False, num_classes=0)


# ------------------------------------------------------------------------------------------------
# transformers' keys -> ours
def _tower_key(key: str, top: Mapping[str, tuple[str, int, int]],
               block: Mapping[str, tuple[str, int, int]]) -> tuple[str, int, int] | None:
    m = _LAYER.match(key)
    if m:
        found = lookup(m.group(2), block)
        return (f"blocks.{m.group(1)}.{found[0]}", found[1], found[2]) if found else None
    if key in _INV_EMBEDDINGS:
        return _INV_EMBEDDINGS[key], 0, 1
    return lookup(key, top)


def _to_ours(state_dict: StateDict, top_table: Mapping[str, Name], what: str) -> StateDict:
    """Every key of the file mapped to ours, dropped with its reason (above), or refused by name."""
    top, block = inverse_table(top_table), inverse_table(_BLOCK)
    out: StateDict = {}
    parts: dict[str, dict[int, torch.Tensor]] = {}
    sizes: dict[str, int] = {}
    for key, value in state_dict.items():
        if _TEXT_TOWER.match(key):
            continue  # the text tower of CLIPModel / SiglipModel
        if key == _PROJECTION:
            found: tuple[str, int, int] | None = ("head.weight", 0, 1)
        else:
            tower = key[len(_PREFIX):] if key.startswith(_PREFIX) else key
            if tower in _DROPPED:
                continue
            if tower.startswith(_POOL_IN) and tower[len(_POOL_IN):] in _PARAMS:  # [q; k; v] -> q, kv
                param, dim = tower[len(_POOL_IN):], value.shape[0] // 3
                _put(out, f"attn_pool.q.{param}", value[:dim], key)
                _put(out, f"attn_pool.kv.{param}", value[dim:], key)
                continue
            found = _tower_key(tower, top, block)
        if found is None:
            raise CheckpointError(f"transformers {what} checkpoint: key {key!r} has no counterpart in vision_attn's "
                                  f"ViT; remove it, or load the folder with transformers itself")
        ours, j, n = found
        if ours == "cls_token":
            value = value.reshape(1, 1, -1)
        elif ours == "pos_embed":
            value = value.unsqueeze(0)
        if n == 1:
            _put(out, ours, value, key)
            continue
        if parts.setdefault(ours, {}).get(j) is not None:
            raise CheckpointError(f"transformers {what} checkpoint: two keys map to part {j} of {ours!r}")
        parts[ours][j] = value
        sizes[ours] = n
    for ours, got in parts.items():
        if len(got) != sizes[ours]:
            names = _BLOCK["attn.qkv"]
            raise CheckpointError(f"transformers {what} checkpoint: {ours!r} needs all of {', '.join(names)}; "
                                  f"the file holds {len(got)} of them")
        _put(out, ours, torch.cat([got[j] for j in range(sizes[ours])], dim=0), ours)
    return out


def _put(out: StateDict, key: str, value: torch.Tensor, source: str) -> None:
    if key in out:
        raise CheckpointError(f"transformers checkpoint: {source!r} maps to {key!r} a second time (a file with the "
                              f"tower under two prefixes?); re-save it with transformers")
    out[key] = value


def _clip_to_ours(state_dict: StateDict, config: Config) -> StateDict:
    return _to_ours(state_dict, _CLIP_TOP, "CLIP")


def _siglip_to_ours(state_dict: StateDict, config: Config) -> StateDict:
    return _to_ours(state_dict, _SIGLIP_TOP, "SigLIP")


# ------------------------------------------------------------------------------------------------
# ours -> the folder transformers 5.x writes
def _refuse(what: str, reason: str) -> CheckpointError:
    return CheckpointError(f"convert to transformers ({what}): {reason}; transformers' model has no place for it")


def _act_name(model: nn.Module, what: str) -> str:
    act = model.blocks[0].mlp.act
    if type(act) is QuickGELU:
        return "quick_gelu"
    if type(act) is nn.GELU:
        return "gelu" if act.approximate == "none" else "gelu_pytorch_tanh"
    if type(act) in (nn.SiLU, nn.ReLU):
        return "silu" if type(act) is nn.SiLU else "relu"
    raise _refuse(what, f"the activation {type(act).__name__}")


def _norm_eps(model: nn.Module, what: str) -> float:
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    if not norms or any(not isinstance(m, nn.LayerNorm) for m in (model.norm, model.blocks[0].norm1)):
        raise _refuse(what, "a norm that is not a LayerNorm")
    eps = {m.eps for m in norms}
    if len(eps) != 1 or any(m.normalized_shape != (model.embed_dim,) for m in norms):
        raise _refuse(what, f"LayerNorms of several eps ({sorted(eps)}) or widths; layer_norm_eps is one number")
    return float(eps.pop())


def _check_tower(model: nn.Module, what: str, *, class_token: bool, pre_norm: bool, pool: str) -> None:
    """What both towers share: learned positions over every token, plain pre-norm blocks with a fused
    biased qkv, no LayerScale or q/k norm, a square image and patch, no extra tokens."""
    if not hasattr(model, "blocks") or not hasattr(model, "patch_embed") or not len(model.blocks):
        raise _refuse(what, f"{type(model).__name__} is not a ViT")
    if (model.cls_token is not None) != class_token or model.dist_token is not None or model.reg_token is not None:
        raise _refuse(what, "its prefix tokens (class, distillation, registers) differ from the tower's "
                            f"({'a class token' if class_token else 'none'})")
    if model.pos_embed is None or (class_token and model.no_embed_class):
        raise _refuse(what, f"position embedding {model.pos_embed_kind!r} (the tower learns one table over all tokens)")
    if model.global_pool != pool or not isinstance(model.fc_norm, nn.Identity):
        raise _refuse(what, f"global_pool={model.global_pool!r} (and its fc_norm); the tower pools by {pool!r}")
    if isinstance(model.norm_pre, nn.Identity) == pre_norm:
        raise _refuse(what, "a pre-norm (norm_pre)" if not pre_norm else "no pre-norm (CLIP has pre_layrnorm)")
    if getattr(model, "mask_token", None) is not None:
        raise _refuse(what, "a mask token")
    for i, blk in enumerate(model.blocks):
        if (type(blk) is not Block or type(blk.attn) is not Attention or type(blk.mlp) is not Mlp
                or blk.attn.qkv.bias is None or not isinstance(blk.attn.q_norm, nn.Identity)
                or not isinstance(blk.ls1, nn.Identity) or not isinstance(blk.ls2, nn.Identity)):
            raise _refuse(what, f"block {i} is not a plain pre-norm block (biased qkv, no q/k norm, no LayerScale)")
    img, patch = model.patch_embed.img_size, model.patch_embed.patch_size
    if img[0] != img[1] or patch[0] != patch[1] or getattr(model.patch_embed, "dynamic_pad", False):
        raise _refuse(what, f"image {tuple(img)} / patch {tuple(patch)} not square (or dynamic padding)")
    hidden = model.blocks[0].mlp.fc1.out_features
    if any(b.mlp.fc1.out_features != hidden for b in model.blocks):
        raise _refuse(what, "blocks of several MLP widths")


def _tower_config(model: nn.Module, what: str) -> dict[str, Any]:
    return dict(hidden_size=model.embed_dim, intermediate_size=model.blocks[0].mlp.fc1.out_features,
                num_hidden_layers=len(model.blocks), num_attention_heads=model.blocks[0].attn.num_heads,
                num_channels=model.patch_embed.proj.in_channels,
                image_size=model.pos_embed_grid[0] * model.patch_embed.patch_size[0],  # the table's
                patch_size=model.patch_embed.patch_size[0], hidden_act=_act_name(model, what),
                layer_norm_eps=_norm_eps(model, what), attention_dropout=0.0)


def _from_tables(state_dict: StateDict, top_table: Mapping[str, Name], prefix: str, what: str) -> StateDict:
    """Our tower's keys -> transformers' (under ``prefix``); a key of ours with no place is refused."""
    out: StateDict = {}
    for key, value in state_dict.items():
        m = re.match(r"^blocks\.(\d+)\.(.+)$", key)
        module, _, param = key.rpartition(".")
        if m:
            inner, _, param = m.group(2).rpartition(".")
            names = _BLOCK.get(inner)
            names = None if names is None else tuple(f"{_BLOCKS}{m.group(1)}.{n}.{param}"
                                                     for n in ((names,) if isinstance(names, str) else names))
        elif key in _EMBEDDINGS:
            names, value = (_EMBEDDINGS[key],), value.reshape(-1) if key == "cls_token" else value[0]
        elif key in top_table:
            names = (top_table[key],)
        elif key in ("attn_pool.q.weight", "attn_pool.q.bias"):
            kv = state_dict[f"attn_pool.kv.{param}"]
            names, value = (f"{_POOL_IN}{param}",), torch.cat([value, kv], dim=0)
        elif key in ("attn_pool.kv.weight", "attn_pool.kv.bias"):
            continue  # packed with attn_pool.q above
        elif module in top_table:
            names = (f"{top_table[module]}.{param}",)
        else:
            names = None
        if names is None:
            raise _refuse(what, f"our key {key!r}")
        for name, part in zip(names, value.chunk(len(names), dim=0)):
            out[f"{prefix}{name}"] = part.contiguous()
    return out


def clip_from_ours(model: nn.Module, state_dict: StateDict) -> tuple[dict[str, Any], StateDict]:
    """A CLIP tower of ours -> ``CLIPVisionModel`` (no head) or ``CLIPVisionModelWithProjection`` (the head,
    bias-free or with a zero bias, as ``visual_projection``)."""
    what = "CLIP"
    _check_tower(model, what, class_token=True, pre_norm=True, pool="token")
    if model.patch_embed.proj.bias is not None:
        raise _refuse(what, "a bias on the patch projection")
    config = dict(_tower_config(model, what), model_type="clip_vision_model", initializer_range=0.02,
                  initializer_factor=1.0)
    state = {k: v for k, v in state_dict.items() if not k.startswith("head.")}
    head = model.head
    if isinstance(head, nn.Identity):
        config = dict(config, architectures=["CLIPVisionModel"], projection_dim=512)  # the config class's default
        return config, _from_tables(state, _CLIP_TOP, "", what)
    if head.bias is not None and bool(state_dict["head.bias"].any()):
        raise _refuse(what, "a head with a bias (visual_projection has none; a head converted from CLIP's "
                            "projection keeps a zero bias, which is written)")
    out = _from_tables(state, _CLIP_TOP, _PREFIX, what)
    out[_PROJECTION] = state_dict["head.weight"].contiguous()
    return dict(config, architectures=["CLIPVisionModelWithProjection"], projection_dim=model.num_classes), out


def siglip_from_ours(model: nn.Module, state_dict: StateDict) -> tuple[dict[str, Any], StateDict]:
    """A SigLIP tower of ours (attention-pooled, no classifier) -> ``SiglipVisionModel``."""
    what = "SigLIP"
    _check_tower(model, what, class_token=False, pre_norm=False, pool="map")
    if model.patch_embed.proj.bias is None:
        raise _refuse(what, "a patch projection without bias")
    pool = model.attn_pool
    if not isinstance(pool, AttentionPoolLatent) or pool.num_heads != model.blocks[0].attn.num_heads:
        raise _refuse(what, "an attention pool that is not SigLIP's (as many heads as the blocks)")
    if pool.mlp.fc1.out_features != model.blocks[0].mlp.fc1.out_features:
        raise _refuse(what, "an attention pool whose MLP width differs from the blocks'")
    if not isinstance(model.head, nn.Identity):
        raise _refuse(what, f"a classifier ({model.num_classes} classes): SiglipVisionModel returns the pooled "
                            f"embedding")
    config = dict(_tower_config(model, what), model_type="siglip_vision_model", architectures=["SiglipVisionModel"],
                  vision_use_head=True)
    return config, _from_tables(state_dict, _SIGLIP_TOP, "", what)


CLIP = register_family(Family(("clip_vision_model", "clip"), _clip_args, _clip_to_ours, clip_from_ours,
                              "CLIP image towers (CLIPVisionModel, ...WithProjection, CLIPModel's vision half)"))
SIGLIP = register_family(Family(("siglip_vision_model", "siglip"), _siglip_args, _siglip_to_ours, siglip_from_ours,
                                "SigLIP image towers (SiglipVisionModel, SiglipModel's vision half)"))
