"""``transformers``' DINOv3 ConvNeXt folders (``model_type`` ``dinov3_convnext``: ``DINOv3ConvNextModel``,
and ``DINOv3ConvNextBackbone``'s weights) as vision_attn's :class:`~vision_attn.models.convnext.ConvNeXt`
(timm's keys). Read only: no ``from_ours``.

Keys, transformers 5.x (4.x files have ``stages.`` where 5.x has ``model.stages.``, renamed as
transformers' ``conversion_mapping.py`` does):

- ``model.stages.0.downsample_layers.{0,1}`` (conv 4x4, LayerNorm) -> ``stem.{0,1}``;
  ``model.stages.{i}.downsample_layers.{0,1}`` (LayerNorm, conv 2x2), i > 0 -> ``stages.{i}.downsample.{0,1}``;
- ``model.stages.{i}.layers.{j}.`` ``depthwise_conv``, ``layer_norm``, ``pointwise_conv1``,
  ``pointwise_conv2``, ``gamma`` -> ``stages.{i}.blocks.{j}.`` ``conv_dw``, ``norm``, ``mlp.fc1``,
  ``mlp.fc2``, ``gamma``;
- ``layer_norm`` (the final norm) -> ``head.norm``.

transformers' ``pooler_output`` is the LayerNorm of the mean of the last map: ``num_classes=0``'s
output (the head's pooling and norm); its ``last_hidden_state`` is that pooled token followed by the
last map's positions, all normalised. Any image size runs as in transformers (no table to resample).
The config's ``depths``, ``hidden_sizes``, ``layer_norm_eps``, ``layer_scale_init_value``,
``hidden_act`` and ``num_channels`` build any size; the closest of ``convnext_tiny`` ... ``convnext_large``
(DINOv3's four) names it.
"""
from __future__ import annotations

import math
import re
from typing import Any

from vision_attn.errors import CheckpointError
from vision_attn.io.state_dict import StateDict
from vision_attn.models.hf.family import Config, Family, register_family
from vision_attn.models.hf.vit import _Reader

__all__ = ["DINOV3_CONVNEXT"]

DEFAULTS: dict[str, dict[str, Any]] = {"dinov3_convnext": dict(
    num_channels=3, hidden_sizes=[96, 192, 384, 768], depths=[3, 3, 9, 3], hidden_act="gelu",
    layer_norm_eps=1e-6, layer_scale_init_value=1e-6, image_size=224)}
_NAMES = {"convnext_tiny": ((3, 3, 9, 3), (96, 192, 384, 768)), "convnext_small": ((3, 3, 27, 3), (96, 192, 384, 768)),
          "convnext_base": ((3, 3, 27, 3), (128, 256, 512, 1024)),
          "convnext_large": ((3, 3, 27, 3), (192, 384, 768, 1536))}
_BLOCK = {"depthwise_conv": "conv_dw", "layer_norm": "norm", "pointwise_conv1": "mlp.fc1",
          "pointwise_conv2": "mlp.fc2", "gamma": "gamma"}
_KEY = re.compile(r"^(?:model\.)?stages\.(\d+)\.(downsample_layers\.([01])|layers\.(\d+)\.(\w+))\.(weight|bias)$")
_GAMMA = re.compile(r"^(?:model\.)?stages\.(\d+)\.layers\.(\d+)\.gamma$")


def _four(c: _Reader, key: str) -> tuple[int, ...]:
    value = c.get(key)
    if not (isinstance(value, (list, tuple)) and len(value) == 4
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise c._bad(key, value, "four positive integers (ConvNeXt's four stages)")
    return tuple(value)


def _args(config: Config, state_dict: StateDict) -> tuple[str, dict[str, Any]]:
    c = _Reader(config, DEFAULTS)
    depths, dims = _four(c, "depths"), _four(c, "hidden_sizes")
    # transformers keeps gamma whatever its initial value (0 included): the layer scale is always there
    kwargs: dict[str, Any] = dict(depths=depths, dims=dims, in_chans=c.int("num_channels"), act_layer=c.act(),
                                  norm_eps=c.number("layer_norm_eps"),
                                  ls_init_value=c.number("layer_scale_init_value") or 1.0,
                                  num_classes=0, img_size=c.pair("image_size"))
    name = min(_NAMES, key=lambda n: (abs(math.log(dims[0] / _NAMES[n][1][0])), abs(sum(depths) - sum(_NAMES[n][0]))))
    return name, kwargs


def _to_ours(state_dict: StateDict, config: Config) -> StateDict:
    out: StateDict = {}
    for key, value in state_dict.items():
        gamma = _GAMMA.match(key)
        m = _KEY.match(key)
        if gamma:
            new = f"stages.{gamma.group(1)}.blocks.{gamma.group(2)}.gamma"
        elif key in ("layer_norm.weight", "layer_norm.bias"):
            new = "head.norm." + key.rpartition(".")[2]
        elif m and m.group(3) is not None:
            stage, part, param = int(m.group(1)), m.group(3), m.group(6)
            new = f"stem.{part}.{param}" if stage == 0 else f"stages.{stage}.downsample.{part}.{param}"
        elif m and m.group(5) in _BLOCK:
            new = f"stages.{m.group(1)}.blocks.{m.group(4)}.{_BLOCK[m.group(5)]}.{m.group(6)}"
        else:
            raise CheckpointError(f"transformers dinov3_convnext checkpoint: key {key!r} has no counterpart in "
                                  f"vision_attn's ConvNeXt; load it with transformers")
        if new in out:
            raise CheckpointError(f"transformers dinov3_convnext checkpoint: two keys map to {new!r} (a file with "
                                  f"4.x and 5.x keys at once?); re-save it with transformers")
        out[new] = value
    return out


DINOV3_CONVNEXT = register_family(Family(("dinov3_convnext",), _args, _to_ours, None,
                                         "DINOv3ConvNextModel, DINOv3ConvNextBackbone (read only)"))
