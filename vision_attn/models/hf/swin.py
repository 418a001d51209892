"""The Swin and Swin V2 families of ``transformers`` folders (``model_type`` ``swin`` and ``swinv2``).

``SwinModel`` / ``Swinv2Model`` (headless: our ``num_classes=0``, whose output is the mean-pooled final
layernorm features, transformers' ``pooler_output``) and ``SwinForImageClassification`` /
``Swinv2ForImageClassification`` (``classifier`` -> our ``head.fc``) map to
:class:`~vision_attn.models.swin.SwinTransformer` and
:class:`~vision_attn.models.swin_v2.SwinTransformerV2` under timm's names and window rule. The
layouts are documented where they are mapped (the tables below). This module never imports the model
classes (the registry imports ``hf``): it returns a registered name and its keyword arguments, and
reads a model it writes through its submodules (``layers.i.blocks.j.attn``, ``patch_embed``, ...).

Outputs agree with transformers' at every size whose stage maps are window multiples (the
configured one included). Elsewhere they can differ by design: transformers pads a map to a window
multiple and then rolls it (torchvision's order), timm's rule rolls and then pads (the same windows
and masks only when the padding equals the shift); transformers' Swin V1 also shrinks a block's
window to the map, and drops its shift, at run time when the map's shorter side is no larger than
the window (and keeps that change on the module), where timm's rule fixes both from the configured
size.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import nn

from vision_attn.errors import CheckpointError
from vision_attn.io.state_dict import StateDict
from vision_attn.models.hf.family import Config, Family, num_labels, register_family, strip_prefix

__all__ = ["SWIN", "SWINV2", "swin_model_args", "swinv2_model_args", "swin_to_ours", "swinv2_to_ours", "swin_from_ours"]

# ------------------------------------------------------------------------------------------------
# transformers' defaults (SwinConfig and Swinv2Config share them), for a config.json that omits a key.
_DEFAULTS: dict[str, Any] = dict(image_size=224, patch_size=4, num_channels=3, embed_dim=96, depths=(2, 2, 6, 2),
                                 num_heads=(3, 6, 12, 24), window_size=7, mlp_ratio=4.0, qkv_bias=True,
                                 hidden_act="gelu", use_absolute_embeddings=False, layer_norm_eps=1e-5,
                                 drop_path_rate=0.1, pretrained_window_sizes=(0, 0, 0, 0))
_LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default: transformers' patch-embedding and patch-merging norms always


def _wb(table: Mapping[str, str]) -> dict[str, str]:
    """A module table expanded to its ``.weight`` and ``.bias`` parameters."""
    return {f"{src}.{p}": f"{dst}.{p}" for src, dst in table.items() for p in ("weight", "bias")}


# ------------------------------------------------------------------------------------------------
# Top level, after the base-model prefix (``swin.`` / ``swinv2.``, absent in a headless file) is
# taken off; the head ``classifier`` carries no prefix. transformers merges patches at the END of
# stage i (``encoder.layers.i.downsample``), timm and we at the START of stage i+1:
#   embeddings.patch_embeddings.projection       -> patch_embed.proj
#   embeddings.norm                              -> patch_embed.norm
#   encoder.layers.{i}.blocks.{j}.*              -> layers.{i}.blocks.{j}.* (the block tables below)
#   encoder.layers.{i}.downsample.{reduction,norm} -> layers.{i+1}.downsample.{reduction,norm}
#   layernorm                                    -> norm
#   classifier                                   -> head.fc
#   embeddings.position_embeddings (use_absolute_embeddings=True) -> refused: we have none
#   embeddings.mask_token, decoder.*  (SwinForMaskedImageModeling, SimMIM) -> dropped (see _DROPPED)
# SwinModel's pooler is an AdaptiveAvgPool1d: no parameters (our head's mean over the map).
_TOP = {**_wb({"embeddings.patch_embeddings.projection": "patch_embed.proj", "embeddings.norm": "patch_embed.norm",
               "layernorm": "norm", "classifier": "head.fc"})}
_DOWNSAMPLE = re.compile(r"^encoder\.layers\.(\d+)\.downsample\.(reduction\.weight|norm\.weight|norm\.bias)$")
_BLOCK = re.compile(r"^encoder\.layers\.(\d+)\.blocks\.(\d+)\.(.+)$")
_DROPPED = {
    "embeddings.mask_token": "the mask token of masked-image pre-training (SimMIM), unused without a mask",
}
_DROPPED_PREFIX = {"decoder.": "SimMIM's pixel decoder (masked-image pre-training); vision_attn builds the backbone"}

# Swin V1 block (under encoder.layers.{i}.blocks.{j}. -> layers.{i}.blocks.{j}.), pre-norm, in the
# two layouts. transformers 4.x (and what 5.x's save_pretrained still writes: it reverses its renames
# on save) names the attention BERT-style; 5.x's modules (conversion_mapping.py's "swin" entry) use
# q/k/v/o_proj and mlp.fc1/fc2:
#   layernorm_before                                   -> norm1
#   attention.self.{query,key,value}  | attention.{q,k,v}_proj   -> attn.qkv (concatenated q, k, v)
#   attention.self.relative_position_bias_table | attention.relative_position_bias.relative_position_bias_table
#                                                      -> attn.relative_position_bias_table
#   attention.output.dense            | attention.o_proj  -> attn.proj
#   layernorm_after                                    -> norm2
#   intermediate.dense                | mlp.fc1        -> mlp.fc1
#   output.dense                      | mlp.fc2        -> mlp.fc2
#   attention.self.relative_position_index (4.x's persistent buffer) | ...relative_position_bias.relative_position_index
#                                                      -> dropped: ours is computed from the window
_V1_LEGACY = {
    **_wb({"layernorm_before": "norm1", "attention.output.dense": "attn.proj", "layernorm_after": "norm2",
           "intermediate.dense": "mlp.fc1", "output.dense": "mlp.fc2"}),
    "attention.self.relative_position_bias_table": "attn.relative_position_bias_table",
}
_V1_NEW = {
    **_wb({"layernorm_before": "norm1", "attention.o_proj": "attn.proj", "layernorm_after": "norm2",
           "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}),
    "attention.relative_position_bias.relative_position_bias_table": "attn.relative_position_bias_table",
}
# parts of our fused attn.qkv: key -> (our key, index of q, k, v)
_V1_QKV_LEGACY = {f"attention.self.{n}.{p}": (f"attn.qkv.{p}", i)
                  for i, n in enumerate(("query", "key", "value")) for p in ("weight", "bias")}
_V1_QKV_NEW = {f"attention.{n}_proj.{p}": (f"attn.qkv.{p}", i) for i, n in enumerate("qkv") for p in ("weight", "bias")}
_V1_DROPPED = {
    "attention.self.relative_position_index": "a pair index of the window (ours is computed from the window size)",
    "attention.relative_position_bias.relative_position_index": "a pair index of the window (ours is computed)",
}

# Swin V2 block: residual post-norm (layernorm_before normalises the attention's output, as our norm1
# does), cosine attention with a continuous position bias; transformers has one layout (no rename
# table for swinv2 in conversion_mapping.py):
#   layernorm_before / layernorm_after                 -> norm1 / norm2
#   attention.self.{query,key,value}.weight            -> attn.qkv.weight (concatenated)
#   attention.self.query.bias / value.bias (the key has none) -> attn.q_bias / attn.v_bias
#   attention.self.logit_scale                         -> attn.logit_scale
#   attention.self.continuous_position_bias_mlp.{0,2}  -> attn.cpb_mlp.{0,2}
#   attention.output.dense / intermediate.dense / output.dense -> attn.proj / mlp.fc1 / mlp.fc2
#   attention.self.relative_coords_table, relative_position_index (buffers some files carry) -> dropped
_V2 = {
    **_wb({"layernorm_before": "norm1", "attention.output.dense": "attn.proj", "layernorm_after": "norm2",
           "intermediate.dense": "mlp.fc1", "output.dense": "mlp.fc2",
           "attention.self.continuous_position_bias_mlp.0": "attn.cpb_mlp.0"}),
    "attention.self.continuous_position_bias_mlp.2.weight": "attn.cpb_mlp.2.weight",
    "attention.self.logit_scale": "attn.logit_scale",
    "attention.self.query.bias": "attn.q_bias",
    "attention.self.value.bias": "attn.v_bias",
}
_V2_QKV = {f"attention.self.{n}.weight": ("attn.qkv.weight", i) for i, n in enumerate(("query", "key", "value"))}
_V2_DROPPED = {
    "attention.self.relative_coords_table": "the log-spaced offsets the bias MLP takes (ours are computed)",
    "attention.self.relative_position_index": "a pair index of the window (ours is computed from the window size)",
}


@dataclass(frozen=True)
class _Layout:
    """One model type's names: the base-model prefix, the block tables and the architectures."""

    model_type: str
    prefix: str
    block: dict[str, str]  # every accepted block key -> ours
    qkv: dict[str, tuple[str, int]]  # block keys that are parts of our fused qkv
    dropped: dict[str, str]  # block keys dropped, with the reason
    writes: dict[str, str]  # from_ours: our block key -> the key save_pretrained writes
    writes_qkv: dict[str, tuple[str, str, str]]  # from_ours: our fused key -> its q, k, v keys
    classifier: str
    headless: str


_SWIN = _Layout(
    "swin", "swin.", {**_V1_LEGACY, **_V1_NEW}, {**_V1_QKV_LEGACY, **_V1_QKV_NEW}, _V1_DROPPED,
    {v: k for k, v in _V1_LEGACY.items()},
    {f"attn.qkv.{p}": tuple(f"attention.self.{n}.{p}" for n in ("query", "key", "value")) for p in ("weight", "bias")},
    "SwinForImageClassification", "SwinModel")
_SWINV2 = _Layout(
    "swinv2", "swinv2.", _V2, _V2_QKV, _V2_DROPPED, {v: k for k, v in _V2.items()},
    {"attn.qkv.weight": tuple(f"attention.self.{n}.weight" for n in ("query", "key", "value"))},
    "Swinv2ForImageClassification", "Swinv2Model")


# ------------------------------------------------------------------------------------------------
# transformers -> ours
def _block_key(layout: _Layout, stage: str, block: str, rest: str, source_key: str,
               parts: dict[str, list[torch.Tensor | None]], value: torch.Tensor) -> str | None:
    """Our key for a block key, or None (dropped, or stored as a part of the fused qkv)."""
    ours = f"layers.{stage}.blocks.{block}."
    if rest in layout.dropped:
        return None
    if rest in layout.qkv:
        key, index = layout.qkv[rest]
        slot = parts.setdefault(ours + key, [None, None, None])
        if slot[index] is not None:
            raise CheckpointError(f"transformers {layout.model_type} checkpoint: {source_key!r} and another key "
                                  f"both hold part {'qkv'[index]} of {ours + key} (a file with both layouts?)")
        slot[index] = value
        return None
    if rest in layout.block:
        return ours + layout.block[rest]
    raise CheckpointError(f"transformers {layout.model_type} checkpoint: key {source_key!r} has no counterpart in "
                          f"vision_attn's Swin{' V2' if layout is _SWINV2 else ''} block")


def _our_key(layout: _Layout, key: str, parts: dict[str, list[torch.Tensor | None]],
             value: torch.Tensor) -> str | None:
    if key in _TOP:
        return _TOP[key]
    if key in _DROPPED or any(key.startswith(p) for p in _DROPPED_PREFIX):
        return None
    m = _DOWNSAMPLE.match(key)
    if m:
        return f"layers.{int(m.group(1)) + 1}.downsample.{m.group(2)}"
    m = _BLOCK.match(key)
    if m:
        return _block_key(layout, m.group(1), m.group(2), m.group(3), key, parts, value)
    if key == "embeddings.position_embeddings":
        raise CheckpointError(f"transformers {layout.model_type} checkpoint: {key!r} (use_absolute_embeddings=True): "
                              f"vision_attn's Swin has no absolute position embedding")
    raise CheckpointError(f"transformers {layout.model_type} checkpoint: key {key!r} has no counterpart in "
                          f"vision_attn's Swin (a {layout.classifier}/{layout.headless} file holds "
                          f"embeddings.*, encoder.layers.*, layernorm.* and classifier.*)")


def _to_ours(layout: _Layout, state_dict: StateDict) -> StateDict:
    """Every key mapped (or dropped with its reason above); unknown keys raise CheckpointError."""
    out: StateDict = {}
    parts: dict[str, list[torch.Tensor | None]] = {}
    for key, value in strip_prefix(state_dict, layout.prefix).items():
        new = _our_key(layout, key, parts, value)
        if new is None:
            continue
        if new in out:
            raise CheckpointError(f"transformers {layout.model_type} checkpoint: two keys map to {new} "
                                  f"(the second: {key!r}); the file mixes two layouts or prefixes")
        out[new] = value
    for key, slot in parts.items():
        missing = [n for n, t in zip("qkv", slot) if t is None]
        if missing:
            raise CheckpointError(f"transformers {layout.model_type} checkpoint: {key} lacks its "
                                  f"{', '.join(missing)} part(s); the file is incomplete")
        assert key not in out, f"{key} mapped twice"
        out[key] = torch.cat(slot)  # type: ignore[arg-type]
    return out


def swin_to_ours(state_dict: StateDict, config: Config) -> StateDict:
    """A ``swin`` folder's state dict (either layout, prefix or not) under our keys."""
    return _to_ours(_SWIN, state_dict)


def swinv2_to_ours(state_dict: StateDict, config: Config) -> StateDict:
    """A ``swinv2`` folder's state dict (prefix or not) under our keys."""
    return _to_ours(_SWINV2, state_dict)


# ------------------------------------------------------------------------------------------------
# config.json -> the registered name and its arguments
# (embed_dim, depth of stage 3, window, image size) of each registered variant; the closest matches the
# width, then the depth, the window, the nearest width, pre-training at a smaller window, the image size
_V1_NAMES = (
    ("swin_tiny_patch4_window7_224", 96, 6, 7, 224), ("swin_small_patch4_window7_224", 96, 18, 7, 224),
    ("swin_base_patch4_window7_224", 128, 18, 7, 224), ("swin_base_patch4_window12_384", 128, 18, 12, 384),
    ("swin_large_patch4_window7_224", 192, 18, 7, 224), ("swin_large_patch4_window12_384", 192, 18, 12, 384),
)
_V2_NAMES = (
    ("swinv2_tiny_window8_256", 96, 6, 8, 256), ("swinv2_tiny_window16_256", 96, 6, 16, 256),
    ("swinv2_small_window8_256", 96, 18, 8, 256), ("swinv2_small_window16_256", 96, 18, 16, 256),
    ("swinv2_base_window8_256", 128, 18, 8, 256), ("swinv2_base_window16_256", 128, 18, 16, 256),
    ("swinv2_base_window12to16_192to256", 128, 18, 16, 256), ("swinv2_base_window12to24_192to384", 128, 18, 24, 384),
)


def _closest(names: tuple[tuple[str, int, int, int, int], ...], embed_dim: int, depths: list[int], window: int,
             image: tuple[int, int], pretrained: bool) -> str:
    deep = depths[2] if len(depths) > 2 else 0

    def distance(row: tuple[str, int, int, int, int]) -> tuple:
        name, dim, depth, win, size = row
        return (dim != embed_dim, depth != deep, win != window, abs(dim - embed_dim), ("to" in name) != pretrained,
                size != image[0])

    return min(names, key=distance)[0]


def _value(config: Config, key: str) -> Any:
    return config.get(key, _DEFAULTS[key])


def _pair(config: Config, key: str) -> tuple[int, int]:
    value = _value(config, key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return int(value[0]), int(value[1])
    raise CheckpointError(f"config.json: {key}={value!r} is not a size (an integer or [height, width])")


def _ints(config: Config, key: str) -> list[int]:
    value = _value(config, key)
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, int) for v in value):
        raise CheckpointError(f"config.json: {key}={value!r} is not a list of integers")
    return [int(v) for v in value]


def _refuse_unbuildable(config: Config) -> None:
    """CheckpointError naming the config key of a feature vision_attn's Swin lacks."""
    model_type = config.get("model_type")
    if _value(config, "use_absolute_embeddings"):
        raise CheckpointError(f"config.json ({model_type}): use_absolute_embeddings=True: vision_attn's Swin has no "
                              f"absolute position embedding; load this checkpoint with transformers")
    act = _value(config, "hidden_act")
    if act != "gelu":
        raise CheckpointError(f"config.json ({model_type}): hidden_act={act!r}: vision_attn's Swin MLP uses exact GELU "
                              f"(transformers' 'gelu') only")
    eps = _value(config, "layer_norm_eps")
    if eps != _LAYER_NORM_EPS:
        raise CheckpointError(f"config.json ({model_type}): layer_norm_eps={eps!r}: vision_attn's Swin normalises "
                              f"with eps {_LAYER_NORM_EPS} (transformers' patch and merging norms always do)")
    window = _value(config, "window_size")
    if not isinstance(window, int) or isinstance(window, bool):
        raise CheckpointError(f"config.json ({model_type}): window_size={window!r}: transformers' Swin takes one "
                              f"integer (square windows)")


def _model_args(config: Config, state_dict: StateDict, v2: bool) -> tuple[str, dict[str, Any]]:
    _refuse_unbuildable(config)
    depths, heads = _ints(config, "depths"), _ints(config, "num_heads")
    if len(depths) != len(heads):
        raise CheckpointError(f"config.json: depths {depths} and num_heads {heads} need one entry per stage")
    image, patch = _pair(config, "image_size"), _pair(config, "patch_size")
    embed_dim, window = int(_value(config, "embed_dim")), int(_value(config, "window_size"))
    kwargs: dict[str, Any] = dict(
        img_size=image, patch_size=patch, in_chans=int(_value(config, "num_channels")), embed_dim=embed_dim,
        depths=tuple(depths), num_heads=tuple(heads), window_size=window,
        mlp_ratio=float(_value(config, "mlp_ratio")), qkv_bias=bool(_value(config, "qkv_bias")),
        drop_path_rate=float(_value(config, "drop_path_rate")))
    pretrained = False
    if v2:
        sizes = _ints(config, "pretrained_window_sizes")
        if len(sizes) < len(depths):
            raise CheckpointError(f"config.json: pretrained_window_sizes {sizes} has fewer entries than the "
                                  f"{len(depths)} stages")
        kwargs["pretrained_window_sizes"] = tuple(sizes[: len(depths)])  # transformers reads entry i for stage i
        pretrained = any(sizes[: len(depths)])
    name = _closest(_V2_NAMES if v2 else _V1_NAMES, embed_dim, depths, window, image, pretrained)
    kwargs["num_classes"] = num_labels(state_dict, "classifier.weight")
    return name, kwargs


def swin_model_args(config: Config, state_dict: StateDict) -> tuple[str, dict[str, Any]]:
    """A ``swin`` config: the closest ``swin_*_patch4_window*`` name and every size of the config."""
    return _model_args(config, state_dict, v2=False)


def swinv2_model_args(config: Config, state_dict: StateDict) -> tuple[str, dict[str, Any]]:
    """A ``swinv2`` config: the closest ``swinv2_*`` name, every size and the pretrained window sizes."""
    return _model_args(config, state_dict, v2=True)


# ------------------------------------------------------------------------------------------------
# ours -> the folder transformers' save_pretrained writes. For Swin V1 that is the 4.x layout above
# (transformers 5.x reverses its renames when it saves, and reads both), for Swin V2 its one layout.
# torchvision's single V2 qkv.bias (3C, its key third never used) is written as query/value biases.
_OUR_BLOCK = re.compile(r"^layers\.(\d+)\.blocks\.(\d+)\.(.+)$")
_OUR_DOWNSAMPLE = re.compile(r"^layers\.(\d+)\.downsample\.(.+)$")
_MERGE_PARAMS = ("reduction.weight", "norm.weight", "norm.bias")


def _refuse(what: str) -> CheckpointError:
    return CheckpointError(f"convert to transformers (Swin): {what}")


def _hf_keys(layout: _Layout, state_dict: StateDict, head: bool) -> StateDict:
    """Our state dict under the keys ``save_pretrained`` writes for ``layout``."""
    top = {v: k for k, v in _TOP.items()}
    prefix = layout.prefix if head else ""
    out: StateDict = {}

    def put(key: str, value: torch.Tensor) -> None:
        key = key if key.startswith("classifier.") else prefix + key
        assert key not in out, f"two keys of ours map to {key}"
        out[key] = value

    for key, value in state_dict.items():
        m_block, m_down = _OUR_BLOCK.match(key), _OUR_DOWNSAMPLE.match(key)
        if key in top:
            put(top[key], value)
        elif m_down and int(m_down.group(1)) > 0 and m_down.group(2) in _MERGE_PARAMS:
            put(f"encoder.layers.{int(m_down.group(1)) - 1}.downsample.{m_down.group(2)}", value)
        elif m_block:
            hf = f"encoder.layers.{m_block.group(1)}.blocks.{m_block.group(2)}."
            rest = m_block.group(3)
            if rest in layout.writes_qkv:
                for part, name in zip(value.chunk(3), layout.writes_qkv[rest]):
                    put(hf + name, part)
            elif rest in layout.writes:
                put(hf + layout.writes[rest], value)
            elif layout is _SWINV2 and rest == "attn.qkv.bias":  # torchvision's layout: q, (unused k), v
                q, _, v = value.chunk(3)
                put(hf + "attention.self.query.bias", q)
                put(hf + "attention.self.value.bias", v)
            else:
                raise _refuse(f"our key {key!r} has no counterpart in transformers' {layout.headless}")
        else:
            raise _refuse(f"our key {key!r} has no counterpart in transformers' {layout.headless} "
                          f"(inserted blocks or another architecture?)")
    return out


def _square(pair: Any, what: str) -> int:
    a, b = tuple(pair)
    if a != b:
        raise _refuse(f"{what} {a}x{b}: transformers' Swin takes one integer (square)")
    return int(a)


def _check_layer_norms(model: nn.Module) -> float:
    """The blocks' and final norm's eps (transformers' layer_norm_eps); the patch-embedding and merging
    norms must have transformers' fixed 1e-5; every norm a LayerNorm."""
    blocks = [m for n, m in model.named_modules() if isinstance(m, nn.LayerNorm)
              and (n == "norm" or ".blocks." in n)]
    fixed = [m for n, m in model.named_modules() if isinstance(m, nn.LayerNorm)
             and (n.startswith("patch_embed.") or ".downsample." in n)]
    eps = {float(m.eps) for m in blocks}
    if len(eps) != 1 or any(float(m.eps) != _LAYER_NORM_EPS for m in fixed):
        raise _refuse(f"layer norm eps {sorted(eps)} (patch/merging {sorted({float(m.eps) for m in fixed})}): "
                      f"transformers has one layer_norm_eps for the blocks and 1e-5 for the patch and merging norms")
    return eps.pop()


def _hf_windows(v2: bool, window: int, res: tuple[int, int], odd: bool) -> tuple[tuple[int, int], tuple[int, int]]:
    """transformers' window and shift of a block at the configured size (square: one integer each)."""
    if v2:  # fixed at construction from the configured resolution; its first entry serves both sides
        w = min(res[0], window)
        s = 0 if (not odd or res[0] <= w) else window // 2
    else:  # set at run time from the map: no shift, and a window the map's shorter side, when that is <= window
        w = min(min(res), window)
        s = 0 if (not odd or min(res) <= window) else window // 2
    return (w, w), (s, s)


def _check_windows(model: nn.Module, v2: bool, grid: tuple[int, int]) -> int:
    """The config's window_size; CheckpointError where a block's window or shift at the configured size
    is not the one transformers would use."""
    stages = list(model.layers)
    window = max(max(b.window_size) for s in stages for b in s.blocks)
    for i, stage in enumerate(stages):
        res = tuple(stage.resolution)
        hf_res = (grid[0] // 2**i, grid[1] // 2**i)  # transformers configures from floor division
        if hf_res != res:
            raise _refuse(f"stage {i} is configured for {res[0]}x{res[1]}, transformers' for {hf_res[0]}x{hf_res[1]} "
                          f"(an image size whose patch grid halves evenly converts)")
        if not v2 and min(res) < window:
            raise _refuse(f"stage {i} ({res[0]}x{res[1]}) is smaller than the {window}x{window} window, which "
                          f"transformers' Swin V1 cannot run (its bias table is fixed to the window)")
        for j, block in enumerate(stage.blocks):
            own = tuple(block.window_size)
            padded = tuple(-(-r // w) * w for r, w in zip(res, own))
            shift = tuple(block.rule.at_run_time(padded, own, tuple(block.shift_size)))
            hf = _hf_windows(v2, window, res, j % 2 == 1)
            if (own, shift) != hf:
                raise _refuse(f"layers.{i}.blocks.{j} runs a {own} window shifted by {shift} at the configured size, "
                              f"transformers a {hf[0]} window shifted by {hf[1]}")
    return window


def _block_sizes(model: nn.Module) -> tuple[list[int], list[int], float, bool, list[int], float]:
    """depths, num_heads, mlp_ratio, qkv_bias, pretrained_window_sizes and the drop-path rate."""
    depths, heads, pretrained, hidden = [], [], [], []
    for stage in model.layers:
        depths.append(len(stage.blocks))
        heads.append(int(stage.blocks[0].attn.num_heads))
        windows = {tuple(getattr(b.attn, "pretrained_window_size", (0, 0))) for b in stage.blocks}
        if len(windows) != 1:
            raise _refuse(f"pretrained window sizes {sorted(windows)} differ within a stage")
        pretrained.append(_square(windows.pop(), "pretrained window size"))
        for block in stage.blocks:
            act = block.mlp.act
            if type(act) is not nn.GELU or act.approximate != "none":
                raise _refuse(f"the MLP's activation {act!r}: transformers' 'gelu' is exact GELU")
            hidden.append((block.attn.dim, block.mlp.fc1.out_features))
    ratio = hidden[0][1] / hidden[0][0]
    if any(int(ratio * d) != h for d, h in hidden):
        raise _refuse(f"MLP widths {sorted(set(hidden))} follow no single mlp_ratio")
    attn = model.layers[0].blocks[0].attn  # q_bias: timm's V2 layout; qkv.bias: V1 and torchvision's V2
    qkv_bias = getattr(attn, "q_bias", None) is not None or attn.qkv.bias is not None
    drop = max((float(m.drop_prob) for m in model.modules() if hasattr(m, "drop_prob")), default=0.0)
    return depths, heads, ratio, qkv_bias, pretrained, drop


def swin_from_ours(model: nn.Module, state_dict: StateDict) -> tuple[dict[str, Any], StateDict]:
    """Our Swin or Swin V2 model -> (``config.json`` as a dict, the state dict under the keys
    ``save_pretrained`` writes): ``SwinForImageClassification`` / ``Swinv2ForImageClassification``, or
    ``SwinModel`` / ``Swinv2Model`` without a head. Which one follows the model (Swin V2 has the
    bias MLP), whichever family is asked. CheckpointError naming what transformers lacks."""
    if not hasattr(model, "layers") or not hasattr(model, "patch_embed") or "patch_embed.proj.weight" not in state_dict:
        raise _refuse(f"{type(model).__name__} is not a vision_attn Swin model")
    v2 = any(".attn.cpb_mlp." in k for k in state_dict)
    layout = _SWINV2 if v2 else _SWIN
    patch = _square(model.patch_embed.patch_size, "patch size")
    image = tuple(int(s) for s in model.patch_embed.img_size)
    grid = (image[0] // patch, image[1] // patch)
    window = _check_windows(model, v2, grid)
    eps = _check_layer_norms(model)
    depths, heads, ratio, qkv_bias, pretrained, drop = _block_sizes(model)
    num_classes = int(getattr(model, "num_classes", 0))
    embed = state_dict["patch_embed.proj.weight"]
    n = len(depths)
    config: dict[str, Any] = {
        "architectures": [layout.classifier if num_classes > 0 else layout.headless],
        "model_type": layout.model_type,
        "image_size": image[0] if image[0] == image[1] else list(image),
        "patch_size": patch,
        "num_channels": int(embed.shape[1]),
        "embed_dim": int(embed.shape[0]),
        "depths": depths,
        "num_heads": heads,
        "num_layers": n,
        "hidden_size": int(embed.shape[0] * 2 ** (n - 1)),
        "window_size": window,
        "mlp_ratio": ratio,
        "qkv_bias": qkv_bias,
        "hidden_act": "gelu",
        "layer_norm_eps": eps,
        "use_absolute_embeddings": False,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "drop_path_rate": drop,
        "initializer_range": 0.02,
        "encoder_stride": 32,
        "stage_names": ["stem"] + [f"stage{i}" for i in range(1, n + 1)],
        "out_features": [f"stage{n}"],
        "out_indices": [n],
        "dtype": str(embed.dtype).removeprefix("torch."),
    }
    if v2:
        config["pretrained_window_sizes"] = pretrained
    if num_classes > 0:
        config["id2label"] = {str(i): f"LABEL_{i}" for i in range(num_classes)}
        config["label2id"] = {f"LABEL_{i}": i for i in range(num_classes)}
    return config, _hf_keys(layout, state_dict, head=num_classes > 0)


SWIN = register_family(Family(
    model_types=("swin",), model_args=swin_model_args, to_ours=swin_to_ours, from_ours=swin_from_ours,
    description="Swin (SwinModel, SwinForImageClassification) -> swin_*_patch4_window*"))
SWINV2 = register_family(Family(
    model_types=("swinv2",), model_args=swinv2_model_args, to_ours=swinv2_to_ours, from_ours=swin_from_ours,
    description="Swin V2 (Swinv2Model, Swinv2ForImageClassification) -> swinv2_*"))
