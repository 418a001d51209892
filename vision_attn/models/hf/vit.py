"""``transformers``' ViT, DeiT and DINOv2 folders as vision_attn's ``VisionTransformer`` (timm's keys), and back.

The families registered here (``config.json`` ``model_type``):

- ``vit``: ``ViTModel`` and ``ViTForImageClassification`` -> ``vit_*_patch16_224`` and kin (the real
  ``facebook/deit-*-patch16-224`` folders without a distillation token are ``vit`` too).
  ``ViTModel``'s ``pooler.dense`` (a tanh pooler behind ``pooler_output``) has no counterpart in
  timm's ViT and is dropped: the model returns the normalised class token (``last_hidden_state[:, 0]``).
- ``deit``: ``DeiTForImageClassificationWithTeacher`` -> ``deit_*_distilled_patch16_224``
  (``cls_classifier`` -> ``head``, ``distillation_classifier`` -> ``head_dist``; at evaluation both
  give the mean of the two heads, the peer's ``logits``). ``DeiTModel`` and
  ``DeiTForImageClassification`` carry the distillation token but read the class token alone: the
  token becomes one register token (``reg_tokens=1``, tokens in the order class, distillation,
  patches, the position table covering all three as transformers' does); their pooler is dropped.
- ``dinov2``: ``Dinov2Model`` (and ``Dinov2Backbone``'s weights) -> ``vit_*_patch14_dinov2``: LayerScale,
  the mask token, ``use_swiglu_ffn`` -> SwiGLU (SiLU, as transformers hard-codes). The pooled output
  (``pooler_output``, the normalised class token) is ``num_classes=0``'s output.
  ``Dinov2ForImageClassification``'s ``classifier`` reads concat(class token, mean of the patch
  tokens), (C, 2D): VisionTransformer's head reads the class token only, so such a head loads only
  replaced or dropped (``create_model(..., num_classes=N or 0)``); a classifier whose patch half is
  all zeros (what ``from_ours`` writes) is exactly a class-token head and is kept.
- ``dinov2_with_registers``: ``Dinov2WithRegistersModel`` -> ``vit_*_patch14_reg4_dinov2``. Its
  position table covers the class token and the patches, not the registers; timm's register models
  (``no_embed_class``) cover the patches alone, so the class token's row is folded into the token
  (``cls_token + position_embeddings[:, 0]``) by ``models/vit.py``'s ``dinov2_to_timm``: the
  embeddings are handed on in the official DINOv2 layout (``register_tokens``), which it maps.

Position tables at another image size: a checkpoint computes what its source computes. A model read
from a folder keeps the table at the folder's grid (``pos_embed_grid``, whatever ``img_size``) and
resamples it at run time as transformers does (``interpolate_pos_encoding``): ViT, DeiT and DINOv2
bicubically without antialiasing (``pos_embed_interp="transformers"``), DINOv2 with registers with it
(``"timm"``: the same values as timm's rule). timm files keep timm's rule: resampled with antialiasing
to the model's grid when loaded, and again at run time for other sizes.

``from_ours`` writes the folder the installed transformers (5.x) saves. The ``vit`` and ``deit``
families write ViT, DeiT or DeiT with teacher by the model's tokens (none, one register token in the
position table, distilled), the DINOv2 families DINOv2 or DINOv2 with registers; a model without a head
as ``ViTForImageClassification`` with no labels (``logits`` = our pooled features) or ``Dinov2Model``
(``pooler_output``), a DINOv2 head as ``[W, 0]`` on concat(class token, patch mean).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import nn

from vision_attn.errors import CheckpointError
from vision_attn.io.state_dict import StateDict
from vision_attn.layers import Attention, Block, LayerScale, Mlp, SwiGLU
from vision_attn.layers.mlp import mlp_ratio_for
from vision_attn.models.hf.family import (Config, Family, Name, inverse_table, lookup, num_labels, register_family,
                                          strip_prefix)

__all__ = ["VIT", "DEIT", "DINOV2", "DINOV2_WITH_REGISTERS", "DEFAULTS", "ACTIVATIONS"]

# ------------------------------------------------------------------------------------------------
# Key layouts. A table maps OUR name (a module: its .weight/.bias follow; or a full parameter name)
# to the 5.x name; a tuple is a packed tensor of ours split along dim 0 into those modules, in order.
#
# transformers 5.x (what save_pretrained writes now), per block:
#   ViT / DeiT: layers.{i}.{layernorm_before, attention.q_proj/k_proj/v_proj, attention.o_proj,
#               layernorm_after, mlp.fc1, mlp.fc2}
#   DINOv2:     encoder.layer.{i}.{norm1, attention.q_proj/k_proj/v_proj, attention.o_proj,
#               layer_scale1.lambda1, norm2, mlp.fc1/fc2 (or SwiGLU mlp.gate_proj/up_proj/down_proj),
#               layer_scale2.lambda1}
# Outside the blocks both versions use embeddings.{cls_token, position_embeddings,
# patch_embeddings.projection, mask_token, distillation_token, register_tokens}, layernorm,
# pooler.dense (ViT/DeiT base models) and the heads, and ForImageClassification files put the base
# model under its prefix (vit., deit., dinov2., dinov2_with_registers.).

_VIT_BLOCK: dict[str, Name] = {
    "norm1": "layernorm_before",
    "attn.qkv": ("attention.q_proj", "attention.k_proj", "attention.v_proj"),  # timm packs q, k, v in this order
    "attn.proj": "attention.o_proj",
    "norm2": "layernorm_after",
    "mlp.fc1": "mlp.fc1",
    "mlp.fc2": "mlp.fc2",
}
_DINOV2_BLOCK: dict[str, Name] = {
    "norm1": "norm1",
    "attn.qkv": ("attention.q_proj", "attention.k_proj", "attention.v_proj"),
    "attn.proj": "attention.o_proj",
    "ls1.gamma": "layer_scale1.lambda1",
    "norm2": "norm2",
    "mlp.fc1": "mlp.fc1",
    "mlp.fc2": "mlp.fc2",
    "ls2.gamma": "layer_scale2.lambda1",
}
# our SwiGLU's fc1 is [gate; value] (act(gate) * value), transformers' act(gate_proj(x)) * up_proj(x)
_DINOV2_SWIGLU_BLOCK: dict[str, Name] = {**_DINOV2_BLOCK, "mlp.fc1": ("mlp.gate_proj", "mlp.up_proj"),
                                          "mlp.fc2": "mlp.down_proj"}

# transformers 4.x (the files on people's disks), mapped to the 5.x names as transformers'
# conversion_mapping.py does on load ("ViTModel" for ViT and DeiT, "Dinov2Model" and
# "Dinov2WithRegistersModel"), per block:
#   ViT / DeiT: encoder.layer.{i}. -> layers.{i}.; attention.attention.query/key/value -> attention.q/k/v_proj;
#               attention.output.dense -> attention.o_proj; intermediate.dense -> mlp.fc1; output.dense -> mlp.fc2
#   DINOv2:     attention.attention.query/key/value -> attention.q/k/v_proj; attention.output.dense ->
#               attention.o_proj; SwiGLU mlp.weights_in (2h, D) = [gate_proj; up_proj], mlp.weights_out -> mlp.down_proj
_ATTENTION_LEGACY: dict[str, Name] = {
    "attention.attention.query": "attention.q_proj",
    "attention.attention.key": "attention.k_proj",
    "attention.attention.value": "attention.v_proj",
    "attention.output.dense": "attention.o_proj",
}
_VIT_LEGACY: dict[str, Name] = {**_ATTENTION_LEGACY, "intermediate.dense": "mlp.fc1", "output.dense": "mlp.fc2"}
_DINOV2_LEGACY: dict[str, Name] = {**_ATTENTION_LEGACY, "mlp.weights_in": ("mlp.gate_proj", "mlp.up_proj"),
                                    "mlp.weights_out": "mlp.down_proj"}

_POOLER = {"pooler.dense": "the tanh pooler of ViTModel/DeiTModel (pooler_output) has no counterpart in timm's "
                           "ViT: the model returns the normalised class token"}


@dataclass(frozen=True)
class _Layout:
    """One architecture's names: base-model ``prefix``, the 5.x block prefix, the tables (ours -> 5.x)
    outside and inside the blocks, the 4.x block prefix and renames, and 5.x modules dropped (why)."""

    model_type: str
    prefix: str
    blocks: str
    top: Mapping[str, Name]
    block: tuple[Mapping[str, Name], ...]  # the first is written; reading accepts any
    legacy_blocks: str
    legacy: Mapping[str, Name]
    dropped: Mapping[str, str]


_EMBED = {"cls_token": "embeddings.cls_token", "pos_embed": "embeddings.position_embeddings",
          "patch_embed.proj": "embeddings.patch_embeddings.projection", "mask_token": "embeddings.mask_token",
          "norm": "layernorm"}
VIT_LAYOUT = _Layout("vit", "vit.", "layers.", {**_EMBED, "head": "classifier"}, (_VIT_BLOCK,),
                     "encoder.layer.", _VIT_LEGACY, _POOLER)
DEIT_LAYOUT = _Layout("deit", "deit.", "layers.", {**_EMBED, "reg_token": "embeddings.distillation_token",
                                                   "head": "classifier"}, (_VIT_BLOCK,),
                      "encoder.layer.", _VIT_LEGACY, _POOLER)
DEIT_TEACHER_LAYOUT = _Layout("deit", "deit.", "layers.",
                              {**_EMBED, "dist_token": "embeddings.distillation_token", "head": "cls_classifier",
                               "head_dist": "distillation_classifier"},
                              (_VIT_BLOCK,), "encoder.layer.", _VIT_LEGACY, {})
DINOV2_LAYOUT = _Layout("dinov2", "dinov2.", "encoder.layer.", {**_EMBED, "head": "classifier"},
                        (_DINOV2_BLOCK, _DINOV2_SWIGLU_BLOCK), "encoder.layer.", _DINOV2_LEGACY, {})
DINOV2_REG_LAYOUT = _Layout("dinov2_with_registers", "dinov2_with_registers.", "encoder.layer.",
                            {**_EMBED, "reg_token": "embeddings.register_tokens", "head": "classifier"},
                            (_DINOV2_BLOCK, _DINOV2_SWIGLU_BLOCK), "encoder.layer.", _DINOV2_LEGACY, {})
_SWIGLU_LAYOUT = {l.model_type: l for l in (DINOV2_LAYOUT, DINOV2_REG_LAYOUT)}

_PARAMS = ("weight", "bias")


def _names(key: str, table: Mapping[str, Name]) -> tuple[str, ...] | None:
    """``key``'s names under ``table`` (a full-name entry, or a module entry with .weight/.bias)."""
    if key in table:
        target = table[key]
        return (target,) if isinstance(target, str) else target
    module, _, param = key.rpartition(".")
    if param in _PARAMS and module in table:
        target = table[module]
        return tuple(f"{t}.{param}" for t in ((target,) if isinstance(target, str) else target))
    return None


def _split(value: torch.Tensor, parts: int) -> tuple[torch.Tensor, ...]:
    """A packed tensor's parts along dim 0 (q, k, v or gate, up), equal in size."""
    if parts == 1:
        return (value,)
    if value.shape[0] % parts:
        raise CheckpointError(f"a packed tensor of shape {tuple(value.shape)} does not split in {parts} equal parts")
    return value.chunk(parts, dim=0)


_LAYER = re.compile(r"^(layers|encoder\.layer|model\.layer|layer)\.(\d+)\.(.+)$")


def _modern(state_dict: StateDict, layout: _Layout) -> StateDict:
    """The file's keys, base-model prefix off, in the 5.x layout (4.x blocks renamed, packed SwiGLU
    ``weights_in`` split into gate/up as transformers does)."""
    out: StateDict = {}
    for key, value in strip_prefix(state_dict, layout.prefix).items():
        m = _LAYER.match(key)
        names: tuple[str, ...] = (key,)
        if m and f"{m.group(1)}." in (layout.legacy_blocks, layout.blocks):  # no 5.x block name is a 4.x one
            renamed = _names(m.group(3), layout.legacy) or (m.group(3),)
            names = tuple(f"{layout.blocks}{m.group(2)}.{r}" for r in renamed)
        for name, part in zip(names, _split(value, len(names))):
            if name in out:
                raise CheckpointError(f"transformers {layout.model_type} checkpoint: keys in two layouts map to "
                                      f"{name!r} (a file with 4.x and 5.x keys at once?); re-save it with transformers")
            out[name] = part
    return out


def _ours(state_dict: StateDict, layout: _Layout) -> StateDict:
    """The 5.x keys of ``layout`` -> ours: every key mapped, dropped with its reason, or refused."""
    top, block = inverse_table(layout.top), inverse_table(*layout.block)
    out: StateDict = {}
    parts: dict[str, dict[int, torch.Tensor]] = {}
    sizes: dict[str, int] = {}
    for key, value in _modern(state_dict, layout).items():
        module = key.rpartition(".")[0]
        if module in layout.dropped:
            continue  # the reason is in the table
        m = re.match(rf"^{re.escape(layout.blocks)}(\d+)\.(.+)$", key)
        found = lookup(m.group(2), block) if m else lookup(key, top)
        if found is None:
            raise CheckpointError(
                f"transformers {layout.model_type} checkpoint: key {key!r} has no counterpart in vision_attn's "
                f"VisionTransformer; a model with other parts (a decoder, a pooler of another kind) cannot load "
                f"here: load it with transformers")
        name, part, count = found
        name = f"blocks.{m.group(1)}.{name}" if m else name
        if count == 1:
            out[name] = value
        else:
            parts.setdefault(name, {})[part] = value
            sizes[name] = count
    for name, got in parts.items():
        if len(got) != sizes[name]:
            raise CheckpointError(f"transformers {layout.model_type} checkpoint: {name} is packed from "
                                  f"{sizes[name]} tensors (q/k/v or gate/up) and the file holds {len(got)} of them; "
                                  f"the file is damaged")
        out[name] = torch.cat([got[j] for j in range(sizes[name])], dim=0)
    return out


def _theirs(state_dict: StateDict, layout: _Layout, block: Mapping[str, Name], prefixed: bool) -> StateDict:
    """Our keys -> 5.x keys (under the base-model prefix when ``prefixed``, the heads never)."""
    heads = {"head", "head_dist"}
    out: StateDict = {}
    for key, value in state_dict.items():
        m = re.match(r"^blocks\.(\d+)\.(.+)$", key)
        names = _names(m.group(2), block) if m else _names(key, layout.top)
        if names is None:
            raise CheckpointError(f"convert to transformers ({layout.model_type}): our key {key!r} has no "
                                  f"counterpart in transformers' model (an inserted block, or an option it lacks)")
        is_head = not m and key.rpartition(".")[0] in heads
        base = "" if is_head or not prefixed else layout.prefix
        names = tuple(f"{base}{layout.blocks}{m.group(1)}.{n}" if m else f"{base}{n}" for n in names)
        for name, part in zip(names, _split(value, len(names))):
            out[name] = part.contiguous()
    return out


# ------------------------------------------------------------------------------------------------
# config.json, as transformers reads it: a key the file omits takes the config class's default
_VIT_DEFAULTS: dict[str, Any] = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                     intermediate_size=3072, hidden_act="gelu", layer_norm_eps=1e-12,
                                     image_size=224, patch_size=16, num_channels=3, qkv_bias=True)
_DINOV2_DEFAULTS: dict[str, Any] = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, mlp_ratio=4,
                                        hidden_act="gelu", layer_norm_eps=1e-6, image_size=224, patch_size=14,
                                        num_channels=3, qkv_bias=True, layerscale_value=1.0, use_swiglu_ffn=False)
DEFAULTS: dict[str, dict[str, Any]] = {
    "vit": _VIT_DEFAULTS,
    "deit": _VIT_DEFAULTS,
    "dinov2": _DINOV2_DEFAULTS,
    "dinov2_with_registers": {**_DINOV2_DEFAULTS, "patch_size": 16, "num_register_tokens": 4},
}

# hidden_act -> our act_layer name (vision_attn.layers.ACT_LAYERS); transformers' tanh approximations of GELU
# (gelu_new, gelu_fast, gelu_accurate, gelu_pytorch_tanh, gelu_python_tanh) are one formula,
# 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
ACTIVATIONS: dict[str, str] = {
    "gelu": "gelu", "gelu_python": "gelu",
    "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "gelu_accurate": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh", "gelu_python_tanh": "gelu_tanh",
    "relu": "relu", "silu": "silu", "swish": "silu",
}


class _Reader:
    """``config.json`` values by name, checked, with the model type's defaults (``defaults``: another
    family's table, default :data:`DEFAULTS`)."""

    def __init__(self, config: Config, defaults: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.config = config
        self.model_type = str(config.get("model_type"))
        self.defaults = (DEFAULTS if defaults is None else defaults)[self.model_type]

    def _bad(self, key: str, value: Any, want: str) -> CheckpointError:
        return CheckpointError(f"transformers {self.model_type} config.json: {key}={value!r} is not {want}; "
                               f"vision_attn cannot build it")

    def get(self, key: str) -> Any:
        return self.config.get(key, self.defaults.get(key))

    def int(self, key: str) -> int:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self._bad(key, value, "a positive integer")
        return value

    def number(self, key: str) -> float:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise self._bad(key, value, "a number >= 0")
        return float(value)

    def flag(self, key: str) -> bool:
        value = self.get(key)
        if not isinstance(value, bool):
            raise self._bad(key, value, "true or false")
        return value

    def pair(self, key: str) -> tuple[int, int]:
        value = self.get(key)
        pair = (value, value) if isinstance(value, int) else tuple(value) if isinstance(value, (list, tuple)) else ()
        if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair):
            raise self._bad(key, value, "a positive integer or a pair of them")
        return pair  # type: ignore[return-value]

    def act(self, key: str = "hidden_act") -> str:
        value = self.get(key)
        if not isinstance(value, str) or value not in ACTIVATIONS:
            raise self._bad(key, value, f"an activation vision_attn has ({', '.join(ACTIVATIONS)})")
        return ACTIVATIONS[value]


def _common(c: _Reader) -> tuple[int, dict[str, Any]]:
    """The embedding width and the sizes every family states."""
    dim, heads = c.int("hidden_size"), c.int("num_attention_heads")
    if dim % heads:
        raise c._bad("num_attention_heads", heads, f"a divisor of hidden_size={dim}")
    head_dim = c.config.get("head_dim")
    if head_dim is not None and head_dim != dim // heads:
        raise c._bad("head_dim", head_dim,
                     f"hidden_size / num_attention_heads = {dim // heads} (vision_attn's attention)")
    img, patch = c.pair("image_size"), c.pair("patch_size")
    if any(s % p for s, p in zip(img, patch)):
        raise c._bad("image_size", c.get("image_size"), f"a multiple of patch_size={c.get('patch_size')}")
    return dim, dict(
        img_size=img, patch_size=patch, in_chans=c.int("num_channels"), embed_dim=dim,
        depth=c.int("num_hidden_layers"), num_heads=heads, qkv_bias=c.flag("qkv_bias"),
        norm_eps=c.number("layer_norm_eps"),
        class_token=True, pos_embed="learn", global_pool="token", fc_norm=False, block="pre",
        # the table stays at the folder's grid and meets other sizes at run time, as transformers does
        pos_embed_grid=tuple(s // p for s, p in zip(img, patch)), pos_embed_interp="transformers",
    )


def _closest(names: Mapping[str, tuple[int, int, int, int]], kwargs: Mapping[str, Any]) -> str:
    """The registered name (width, depth, patch, image) nearest the config's: width first."""
    dim, depth, patch, img = kwargs["embed_dim"], kwargs["depth"], kwargs["patch_size"][0], kwargs["img_size"][0]
    return min(names, key=lambda n: (abs(math.log(dim / names[n][0])), abs(depth - names[n][1]),
                                     patch != names[n][2], img != names[n][3]))


def _has(state_dict: StateDict, name: str) -> bool:
    return any(k == name or k.endswith("." + name) for k in state_dict)


_VIT_NAMES = {"vit_tiny_patch16_224": (192, 12, 16, 224), "vit_small_patch16_224": (384, 12, 16, 224),
              "vit_base_patch16_224": (768, 12, 16, 224), "vit_base_patch32_224": (768, 12, 32, 224),
              "vit_base_patch16_384": (768, 12, 16, 384), "vit_large_patch16_224": (1024, 24, 16, 224)}
_DEIT_SIZES = {"tiny": (192, 12, 16, 224), "small": (384, 12, 16, 224), "base": (768, 12, 16, 224)}
_DEIT_NAMES = {f"deit_{s}_patch16_224": v for s, v in _DEIT_SIZES.items()}
_DEIT_DISTILLED_NAMES = {f"deit_{s}_distilled_patch16_224": v for s, v in _DEIT_SIZES.items()}
_DINOV2_SIZES = {"small": (384, 12, 14, 518), "base": (768, 12, 14, 518), "large": (1024, 24, 14, 518),
                 "giant": (1536, 40, 14, 518)}
_DINOV2_NAMES = {f"vit_{s}_patch14_dinov2": v for s, v in _DINOV2_SIZES.items()}
_DINOV2_REG_NAMES = {f"vit_{s}_patch14_reg4_dinov2": v for s, v in _DINOV2_SIZES.items()}


def _vit_mlp(c: _Reader, dim: int) -> dict[str, Any]:
    return dict(mlp_ratio=mlp_ratio_for(c.int("intermediate_size"), dim), ffn_layer="mlp", act_layer=c.act(),
                init_values=None, no_embed_class=False)


def _vit_args(config: Config, state_dict: StateDict) -> tuple[str, dict[str, Any]]:
    c = _Reader(config)
    dim, kwargs = _common(c)
    kwargs.update(_vit_mlp(c, dim), distilled=False, reg_tokens=0, mask_token=_has(state_dict, "embeddings.mask_token"),
                  num_classes=num_labels(state_dict, "classifier.weight"))
    return _closest(_VIT_NAMES, kwargs), kwargs


def _deit_teacher(config: Config, state_dict: StateDict) -> bool:
    """``DeiTForImageClassificationWithTeacher`` (two heads) rather than ``DeiTModel`` or
    ``DeiTForImageClassification`` (the class token's head alone)."""
    architectures = config.get("architectures") or ()
    return ("DeiTForImageClassificationWithTeacher" in architectures
            or any(k.startswith(("cls_classifier.", "distillation_classifier.")) for k in state_dict))


def _deit_args(config: Config, state_dict: StateDict) -> tuple[str, dict[str, Any]]:
    c = _Reader(config)
    dim, kwargs = _common(c)
    teacher = _deit_teacher(config, state_dict)
    kwargs.update(_vit_mlp(c, dim), distilled=teacher, reg_tokens=0 if teacher else 1,
                  mask_token=_has(state_dict, "embeddings.mask_token"),
                  num_classes=num_labels(state_dict, "cls_classifier.weight" if teacher else "classifier.weight"))
    return _closest(_DEIT_DISTILLED_NAMES if teacher else _DEIT_NAMES, kwargs), kwargs


def _dinov2_mlp(c: _Reader, dim: int) -> dict[str, Any]:
    """transformers' DINOv2 feed-forward: ``int(D * mlp_ratio)`` wide, or SwiGLU whose halves are
    ``(int(int(D * mlp_ratio) * 2 / 3) + 7) // 8 * 8`` wide (SiLU, whatever hidden_act says)."""
    hidden = int(dim * c.number("mlp_ratio"))
    if c.flag("use_swiglu_ffn"):
        half = (int(hidden * 2 / 3) + 7) // 8 * 8
        return dict(mlp_ratio=mlp_ratio_for(2 * half, dim), ffn_layer="swiglu", act_layer="silu")
    if hidden <= 0:
        raise c._bad("mlp_ratio", c.get("mlp_ratio"), "a ratio giving a hidden width > 0")
    return dict(mlp_ratio=mlp_ratio_for(hidden, dim), ffn_layer="mlp", act_layer=c.act())


def _dinov2_args(config: Config, state_dict: StateDict) -> tuple[str, dict[str, Any]]:
    c = _Reader(config)
    dim, kwargs = _common(c)
    registers = c.model_type == "dinov2_with_registers"
    reg_tokens = c.int("num_register_tokens") if registers else 0
    # LayerScale is always there (layer_scale{1,2}.lambda1); layerscale_value is its initial value
    kwargs.update(_dinov2_mlp(c, dim), init_values=c.number("layerscale_value") or 1.0, distilled=False,
                  reg_tokens=reg_tokens, no_embed_class=registers,
                  # Dinov2WithRegisters interpolates with antialiasing: timm's rule, at run time all the same
                  pos_embed_interp="timm" if registers else "transformers",
                  mask_token=_has(state_dict, "embeddings.mask_token"),
                  num_classes=num_labels(state_dict, "classifier.weight"))
    return _closest(_DINOV2_REG_NAMES if registers else _DINOV2_NAMES, kwargs), kwargs


# ------------------------------------------------------------------------------------------------
# to_ours: 5.x or 4.x keys -> ours, then each architecture's steps beyond renaming
def _mask_token_2d(out: StateDict) -> StateDict:
    """ViT's and DeiT's mask token is (1, 1, D), ours (and DINOv2's) (1, D)."""
    if "mask_token" in out:
        out["mask_token"] = out["mask_token"].reshape(1, -1)
    return out


def _vit_to_ours(state_dict: StateDict, config: Config) -> StateDict:
    return _mask_token_2d(_ours(state_dict, VIT_LAYOUT))


def _deit_to_ours(state_dict: StateDict, config: Config) -> StateDict:
    layout = DEIT_TEACHER_LAYOUT if _deit_teacher(config, state_dict) else DEIT_LAYOUT
    return _mask_token_2d(_ours(state_dict, layout))


def _class_token_head(out: StateDict) -> StateDict:
    """Dinov2ForImageClassification's classifier (C, 2D) reads concat(class token, mean of the patch
    tokens). With the patch half all zeros it is exactly a head on the class token: (C, D), kept.
    Any other stays (C, 2D): it does not fit our head and loads only replaced or dropped."""
    weight, dim = out.get("head.weight"), out["norm.weight"].shape[0] if "norm.weight" in out else None
    if weight is not None and dim is not None and weight.ndim == 2 and weight.shape[1] == 2 * dim:
        if not torch.any(weight[:, dim:]):
            out["head.weight"] = weight[:, :dim].contiguous()
    return out


def _dinov2_to_ours(state_dict: StateDict, config: Config) -> StateDict:
    """Our keys; with registers, the embeddings as the official DINOv2 files hold them (``register_tokens``,
    the table covering class + patches), which VisionTransformer.convert_checkpoint maps
    (``models/vit.py``'s ``dinov2_to_timm``: the one place the class row is folded into the class token
    for ``no_embed_class`` models; folding here too would fold twice, since a state dict with
    ``mask_token`` is recognised as official DINOv2)."""
    registers = config.get("model_type") == "dinov2_with_registers"
    out = _class_token_head(_ours(state_dict, DINOV2_REG_LAYOUT if registers else DINOV2_LAYOUT))
    if registers and "reg_token" in out:
        out["register_tokens"] = out.pop("reg_token")
    return out


# ------------------------------------------------------------------------------------------------
# from_ours: our VisionTransformer -> the folder transformers 5.x writes
@dataclass(frozen=True)
class _Arch:
    """What of a VisionTransformer a transformers config can state."""

    dim: int
    depth: int
    heads: int
    patch: tuple[int, int]
    img: tuple[int, int]
    in_chans: int
    qkv_bias: bool
    eps: float
    act: str
    hidden: int
    swiglu: bool
    layer_scale: bool
    distilled: bool
    reg_tokens: int
    no_embed_class: bool
    mask_token: bool
    num_classes: int
    dtype: str  # transformers' name: "float32", "bfloat16", ...


def _act_name(act: nn.Module, what: str) -> str:
    if type(act) is nn.GELU:
        return "gelu" if act.approximate == "none" else "gelu_pytorch_tanh"
    names = {nn.ReLU: "relu", nn.SiLU: "silu"}
    if type(act) not in names:
        raise CheckpointError(f"{what}: activation {type(act).__name__} has no hidden_act in transformers")
    return names[type(act)]


def _inspect(model: nn.Module, what: str) -> _Arch:
    """The model's architecture; CheckpointError naming what transformers' ViTs cannot hold."""
    needed = ("patch_embed", "blocks", "pos_embed", "cls_token", "norm", "head")
    if not all(hasattr(model, a) for a in needed):
        raise CheckpointError(f"{what}: {type(model).__name__} is not vision_attn's VisionTransformer")

    def refuse(reason: str) -> CheckpointError:
        return CheckpointError(f"{what}: the model has {reason}, which transformers' ViT, DeiT and DINOv2 lack")

    blocks = list(model.blocks)
    if not blocks:
        raise refuse("no blocks")
    if getattr(model, "pos_embed_kind", "learn") != "learn" or model.pos_embed is None:
        raise refuse(f"pos_embed={getattr(model, 'pos_embed_kind', None)!r} (transformers' position table is learned)")
    if model.cls_token is None or getattr(model, "global_pool", "token") != "token":
        raise refuse("no class-token head (global_pool='avg' or class_token=False)")
    fc_norm = getattr(model, "fc_norm", nn.Identity())
    if not isinstance(fc_norm, nn.Identity) or not isinstance(model.norm, nn.LayerNorm):
        raise refuse("a norm other than one final LayerNorm (fc_norm)")
    if not isinstance(model.patch_embed.norm, nn.Identity) or model.patch_embed.proj.bias is None:
        raise refuse("a patch embedding with a norm or without bias")
    norms = [model.norm] + [n for b in blocks for n in (b.norm1, b.norm2)]
    first = blocks[0]
    for b in blocks:
        if type(b) is not Block or type(b.attn) is not Attention:
            raise refuse(f"a block of type {type(b).__name__} / attention {type(b.attn).__name__}")
        if not (isinstance(b.attn.q_norm, nn.Identity) and isinstance(b.attn.k_norm, nn.Identity)):
            raise refuse("qk_norm=True")
        if type(b.mlp) is not type(first.mlp) or type(b.ls1) is not type(first.ls1):
            raise refuse("blocks of different kinds")
    if type(first.mlp) not in (Mlp, SwiGLU):
        raise refuse(f"a feed-forward network of type {type(first.mlp).__name__}")
    if not all(type(n) is nn.LayerNorm and n.elementwise_affine and n.eps == model.norm.eps for n in norms):
        raise refuse("norms of different kinds or eps (transformers states one layer_norm_eps)")
    distilled = bool(getattr(model, "distilled", False))
    reg = getattr(model, "reg_token", None)
    return _Arch(
        dim=int(model.embed_dim), depth=len(blocks), heads=int(first.attn.num_heads),
        patch=tuple(model.patch_embed.patch_size),
        img=tuple(g * p for g, p in zip(model.pos_embed_grid, model.patch_embed.patch_size)),  # the table's
        in_chans=int(model.patch_embed.in_chans), qkv_bias=first.attn.qkv.bias is not None,
        eps=float(model.norm.eps), act=_act_name(first.mlp.act, what), hidden=int(first.mlp.fc1.out_features),
        swiglu=type(first.mlp) is SwiGLU, layer_scale=isinstance(first.ls1, LayerScale), distilled=distilled,
        reg_tokens=0 if reg is None else int(reg.shape[1]), no_embed_class=bool(model.no_embed_class),
        mask_token=getattr(model, "mask_token", None) is not None, num_classes=int(getattr(model, "num_classes", 0)),
        dtype=str(model.patch_embed.proj.weight.dtype).removeprefix("torch."),
    )


def _size(pair: tuple[int, int]) -> int | list[int]:
    return pair[0] if pair[0] == pair[1] else list(pair)


def _labels(num_classes: int) -> dict[str, Any]:
    return {"id2label": {str(i): f"LABEL_{i}" for i in range(num_classes)},
            "label2id": {f"LABEL_{i}": i for i in range(num_classes)}}


def _base_config(a: _Arch, model_type: str, architecture: str) -> dict[str, Any]:
    return {
        "architectures": [architecture], "model_type": model_type, "hidden_size": a.dim,
        "num_hidden_layers": a.depth, "num_attention_heads": a.heads, "hidden_act": a.act,
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "initializer_range": 0.02,
        "layer_norm_eps": a.eps, "image_size": _size(a.img), "patch_size": _size(a.patch),
        "num_channels": a.in_chans, "qkv_bias": a.qkv_bias, "dtype": a.dtype, **_labels(a.num_classes),
    }


def _vit_from_ours(state_dict: StateDict, a: _Arch, what: str) -> tuple[dict[str, Any], StateDict]:
    """ViTForImageClassification (a head, or none: logits = the pooled class token), DeiTForImageClassification
    (one register token = the distillation token) or DeiTForImageClassificationWithTeacher (distilled)."""
    if a.layer_scale or a.swiglu:
        raise CheckpointError(f"{what}: the model has {'LayerScale' if a.layer_scale else 'a SwiGLU feed-forward'}, "
                              f"which transformers' ViT and DeiT lack (convert it as DINOv2)")
    if a.mask_token:
        raise CheckpointError(f"{what}: the model has a mask token, which transformers' ViT and DeiT classifiers lack")
    if a.no_embed_class or a.reg_tokens > (0 if a.distilled else 1):
        raise CheckpointError(f"{what}: the model has {a.reg_tokens} register token(s) (no_embed_class="
                              f"{a.no_embed_class}); transformers' ViT has none, DeiT one distillation token "
                              f"in the position table")
    if a.distilled:
        layout, arch = DEIT_TEACHER_LAYOUT, "DeiTForImageClassificationWithTeacher"
    elif a.reg_tokens == 1:
        layout, arch = DEIT_LAYOUT, "DeiTForImageClassification"
    else:
        layout, arch = VIT_LAYOUT, "ViTForImageClassification"
    config = {**_base_config(a, layout.model_type, arch), "intermediate_size": a.hidden,
              "encoder_stride": a.patch[0], "pooler_output_size": a.dim, "pooler_act": "tanh"}
    state = dict(state_dict)
    if "mask_token" in state:
        state["mask_token"] = state["mask_token"].reshape(1, 1, -1)
    return config, _theirs(state, layout, _VIT_BLOCK, prefixed=True)


def _dinov2_ratio(a: _Arch, what: str) -> int:
    """transformers' integer mlp_ratio that gives the model's feed-forward width."""
    def width(r: int) -> int:
        hidden = int(a.dim * r)
        return 2 * ((int(hidden * 2 / 3) + 7) // 8 * 8) if a.swiglu else hidden

    for r in (4, *range(1, 65)):
        if width(r) == a.hidden:
            return r
    rule = "SwiGLU halves rounded to 8" if a.swiglu else "hidden = D * mlp_ratio"
    raise CheckpointError(f"{what}: a feed-forward width of {a.hidden} for width {a.dim} is no integer mlp_ratio "
                          f"of transformers' DINOv2 ({rule})")


def _dinov2_from_ours(state_dict: StateDict, a: _Arch, what: str) -> tuple[dict[str, Any], StateDict]:
    """Dinov2Model / Dinov2WithRegistersModel (headless: pooler_output = our features), or
    Dinov2ForImageClassification whose classifier reads the class token: [W, 0] on concat(class, patch mean)."""
    if a.distilled:
        raise CheckpointError(f"{what}: the model has a distillation token and head, which transformers' DINOv2 lacks")
    if a.swiglu and a.act != "silu":
        raise CheckpointError(f"{what}: the SwiGLU feed-forward uses {a.act}; transformers' DINOv2 SwiGLU uses silu")
    layout = DINOV2_REG_LAYOUT if a.reg_tokens else DINOV2_LAYOUT
    arch = ("Dinov2WithRegistersForImageClassification" if a.reg_tokens else "Dinov2ForImageClassification") \
        if a.num_classes else ("Dinov2WithRegistersModel" if a.reg_tokens else "Dinov2Model")
    config = {**_base_config(a, layout.model_type, arch), "mlp_ratio": _dinov2_ratio(a, what),
              "layerscale_value": 1.0, "drop_path_rate": 0.0, "use_swiglu_ffn": a.swiglu,
              "apply_layernorm": True, "reshape_hidden_states": True}
    state = dict(state_dict)
    if a.reg_tokens:
        config["num_register_tokens"] = a.reg_tokens
    else:
        config["use_mask_token"] = a.mask_token
    state.update(_dinov2_embeddings(state, a))
    if not a.layer_scale:  # transformers' layers always scale: by ones
        for i in range(a.depth):
            state[f"blocks.{i}.ls1.gamma"] = state[f"blocks.{i}.ls2.gamma"] = torch.ones(a.dim)
    if a.num_classes:
        w = state["head.weight"]
        state["head.weight"] = torch.cat([w, torch.zeros_like(w)], dim=1)  # the patch mean's half reads nothing
    block = _DINOV2_SWIGLU_BLOCK if a.swiglu else _DINOV2_BLOCK
    return config, _theirs(state, layout, block, prefixed=bool(a.num_classes))


def _dinov2_embeddings(state: StateDict, a: _Arch) -> StateDict:
    """Our prefix tokens and table -> transformers' (class row in the table; registers without one;
    with registers a mask token always, zeros (its initial value) when we have none)."""
    pos, cls = state["pos_embed"], state["cls_token"]
    out: StateDict = {}
    if a.no_embed_class:  # our table covers the patches: the class row adds nothing
        out["pos_embed"] = torch.cat([torch.zeros_like(pos[:, :1]), pos], dim=1)
    else:  # our table covers class, registers, patches: the register rows join the register tokens
        out["pos_embed"] = torch.cat([pos[:, :1], pos[:, 1 + a.reg_tokens:]], dim=1)
        if a.reg_tokens:
            out["reg_token"] = state["reg_token"] + pos[:, 1:1 + a.reg_tokens]
    out["cls_token"] = cls
    if a.reg_tokens and not a.mask_token:
        out["mask_token"] = torch.zeros(1, a.dim)
    return out


def _vit_family_from_ours(model: nn.Module, state_dict: StateDict) -> tuple[dict[str, Any], StateDict]:
    """ViT/DeiT families: ViT or DeiT by the model's tokens."""
    what = f"convert {type(model).__name__} to transformers"
    return _vit_from_ours(state_dict, _inspect(model, what), what)


def _dinov2_family_from_ours(model: nn.Module, state_dict: StateDict) -> tuple[dict[str, Any], StateDict]:
    """DINOv2 families: with registers when the model has register tokens."""
    what = f"convert {type(model).__name__} to transformers"
    return _dinov2_from_ours(state_dict, _inspect(model, what), what)


VIT = register_family(Family(("vit",), _vit_args, _vit_to_ours, _vit_family_from_ours,
                             "ViTModel, ViTForImageClassification"))
DEIT = register_family(Family(("deit",), _deit_args, _deit_to_ours, _vit_family_from_ours,
                              "DeiTModel, DeiTForImageClassification(WithTeacher)"))
DINOV2 = register_family(Family(("dinov2",), _dinov2_args, _dinov2_to_ours, _dinov2_family_from_ours,
                                "Dinov2Model, Dinov2ForImageClassification (head replaced or dropped)"))
DINOV2_WITH_REGISTERS = register_family(Family(("dinov2_with_registers",), _dinov2_args, _dinov2_to_ours,
                                               _dinov2_family_from_ours,
                                               "Dinov2WithRegistersModel, Dinov2WithRegistersForImageClassification"))
