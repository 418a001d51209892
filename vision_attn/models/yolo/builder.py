"""Building a detector from a checked YAML: channel inference, scales, repeats, the probe forward.

Rules (those of ultralytics, so its YAMLs build the same networks): repeats become
``max(round(n * depth), 1)`` when n > 1; a conv-like module's output channels become
``ceil(min(c, max_channels) * width / 8) * 8``; Concat sums its inputs' channels; Detect receives its
inputs' channels (a Segment head also its prototype width ``npr``, scaled like a channel count; a Pose
head the YAML's or the data's ``kpt_shape``; an OBB head its angle outputs ``ne``);
attention rows take the channels of their input (with ``{zero_init: true}`` in their arguments they start
as the exact identity: a block that takes ``zero_init`` itself does it, any other is
wrapped in :class:`~vision_attn.layers.plugins.IdentityBlend`, keys ``model.N.block.*`` and
``model.N.scale``); a Backbone row reports the
channels of its list of maps, a SimpleFeaturePyramid row ``[c2, scales]`` a list of maps of ``c2``
channels each (scaled like a conv row's), and an Index row those of the map it picks. Scale-dependent arguments
as in ultralytics' parser (:func:`_scale_rules`): at m, l and x C3k2's ``c3k`` flag is forced on; at l
and x A2C2f gets ``(residual=True, mlp_ratio=1.2)``. Detect's class branch is the YOLOv8 form unless
the YAML has a row of :data:`MODERN_HEAD_ROWS`.

Classifiers (the -cls YAMLs): a Classify row, the last, receives ``[c_in, nc, *rest]`` (the class count is
never scaled); a ResNetLayer row's arguments are used as written (its ``c1`` checked against the input)
and it gives ``c2`` (stem) or ``e * c2`` channels; a TorchVision row gives the channels it declares
(checked). A classifier has no strides to probe, and keeps torch's batch-norm settings
(:data:`CLASSIFIER_NORM`), as ultralytics' classification models do.

RT-DETR (the rtdetr-*.yaml and yolov8-rtdetr.yaml rows): HGStem / HGBlock take ``[cm, c2, ...]`` unscaled
(an HGBlock row's repeats become its convolution count), RepC3 is scaled like C3, AIFI receives
``[c_in, *args]`` and keeps the channels, and the RTDETRDecoder row (the last) receives its inputs'
channels as its second argument; its inputs' strides are probed as Detect's are (:attr:`DetectionModel.task`
``"rtdetr"``).
"""
from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers.plugins import IdentityBlend
from vision_attn.models.yolo.classify import Classify
from vision_attn.models.yolo.conv import Conv
from vision_attn.models.yolo.detect import Detect
from vision_attn.models.yolo.modules import ACTIVATIONS, MODULES
from vision_attn.models.yolo.resnet_rows import resnet_layer_channels
from vision_attn.models.yolo.rtdetr_decoder import RTDETRDecoder
from vision_attn.models.yolo.schema import MAX_CHANNELS, MULTI_INPUT_KINDS, DetectorSpec, Row, parse_spec
from vision_attn.models.yolo.obb import OBB
from vision_attn.models.yolo.pose import Pose, check_kpt_shape
from vision_attn.models.yolo.segment import Segment

__all__ = ["DetectionModel", "LayerInfo", "build_detector", "build_from_spec", "make_divisible"]

PROBE_SIZE = 256
"""Side of the zero image whose forward finds Detect's strides."""

MODERN_HEAD_ROWS = ("C3k2", "A2C2f", "C2fCIB")
"""A YAML with one of these rows gets Detect's light class branch (depth-wise + 1x1 pairs), as in
ultralytics' parser; the others (v3/v5/v8/v9 layouts) keep the "legacy" two 3x3 convolutions."""


def make_divisible(x: float, divisor: int = 8) -> int:
    """The smallest multiple of ``divisor`` >= x."""
    return int(math.ceil(x / divisor) * divisor)


class LayerInfo(dict):
    """One built row: index, from, repeats (after scaling), module, arguments, params, channels."""


class DetectionModel(nn.Module):
    """The rows of a YAML as ``model.0 ... model.N`` (ultralytics' state-dict keys).

    (B, 3, H, W) -> Detect's output: in training a list of (B, 4*reg_max + nc, H/s, W/s) maps, in
    eval (B, 4 + nc, A) decoded boxes and class probabilities. H and W must be multiples of the
    largest stride (32 for the shipped YAMLs). With a Classify head (:attr:`task` ``"classify"``):
    logits (B, nc) in training and eval, any H and W; :attr:`stride` stays empty. With an
    :class:`RTDETRDecoder` head (:attr:`task` ``"rtdetr"``): in eval the rows of a Detect head's output,
    (B, 4 + nc, nq), each query's cx, cy, w, h in input pixels and class probabilities (read with a top-k,
    no NMS: the head is end to end); in training the decoder's tuple (see the class), with denoising
    queries made from ``targets`` (:func:`vision_attn.losses.detr_targets`' dict) when given.
    """

    def __init__(self, layers: list[nn.Module], inputs: list[tuple[int, ...]], multi: list[bool],
                 info: list[LayerInfo], spec: DetectorSpec) -> None:
        super().__init__()
        self.model = nn.ModuleList(layers)
        self.inputs = inputs
        self.multi = multi
        self.info = info
        self.nc = spec.nc
        self.scale = spec.scale
        self.yaml = spec.raw
        self.source = spec.source
        self.stride: list[float] = []
        self.in_channels = 3

    @property
    def task(self) -> str:
        """What the last row predicts: ``"classify"`` (a :class:`Classify` head: logits (B, nc)),
        ``"segment"`` (a :class:`Segment` head), ``"pose"`` (a :class:`Pose` head: boxes and keypoints),
        ``"obb"`` (an :class:`OBB` head: rotated boxes), ``"detect"`` (any other :class:`Detect` head),
        ``"rtdetr"`` (an :class:`RTDETRDecoder` head: queries, not a Detect's dense maps), else
        ``"features"`` (rows without a head: the last row's map)."""
        head = self.model[-1]
        if isinstance(head, Classify):
            return "classify"
        if isinstance(head, RTDETRDecoder):
            return "rtdetr"
        if isinstance(head, Segment):
            return "segment"
        if isinstance(head, Pose):
            return "pose"
        if isinstance(head, OBB):
            return "obb"
        return "detect" if isinstance(head, Detect) else "features"

    def forward_rows(self, x: torch.Tensor, upto: int | None = None) -> list[Any]:
        """Run rows 0..upto-1 (all by default) and return every row's output."""
        outputs: list[Any] = []
        n = len(self.model) if upto is None else upto
        for i in range(n):
            ins = [x if j == -1 else outputs[j] for j in self.inputs[i]]
            outputs.append(self.model[i](ins if self.multi[i] else ins[0]))
        return outputs

    def forward(self, x: torch.Tensor, targets: dict[str, Any] | None = None) -> Any:
        head = self.model[-1]
        if not isinstance(head, RTDETRDecoder):
            return self.forward_rows(x)[-1]
        maps = self.forward_rows(x, len(self.model) - 1)
        out = head([x if j == -1 else maps[j] for j in self.inputs[-1]], targets)
        return out if self.training else head.as_rows(out, x.shape[-2:])  # (B, 4 + nc, nq)


def _substitute(value: Any, spec: DetectorSpec) -> Any:
    """Replace the schema's names (``nc``) and the words None/True/False written as strings."""
    if isinstance(value, list):
        return [_substitute(v, spec) for v in value]
    if isinstance(value, str):
        if value == "nc":
            return spec.nc
        if value == "kpt_shape" and spec.kpt_shape is not None:
            return list(spec.kpt_shape)
        if value in ("None", "True", "False"):
            return {"None": None, "True": True, "False": False}[value]
    return value


def _attention_kwargs(row: Row, args: list[Any], label: str) -> dict[str, Any]:
    """An attention row's arguments: [] or one mapping of keywords; for CBAM also ultralytics'
    ``[channels]`` / ``[channels, kernel_size]`` (the channel count is then taken from the input)."""
    if not args:
        return {}
    if len(args) == 1 and isinstance(args[0], dict):
        return dict(args[0])
    if row.module == "CBAM" and len(args) <= 2 and all(isinstance(a, int) for a in args):
        return {"kernel_size": args[1]} if len(args) == 2 else {}
    raise ConfigError(f"{label}: row {row.index} field 'args': {args!r}: an attention row takes its channels from "
                      f"its input; give [] or one mapping of keywords, e.g. [{{reduction: 8}}]")


def _check_map_inputs(row: Row, spec: DetectorSpec, ch_in: list[Any], kind: str, label: str) -> None:
    """A list of maps (a Backbone, SimpleFeaturePyramid or CBLinear row) feeds Index and CBFuse rows only; an Index row takes
    such a list; a CBFuse row takes such lists then one map."""
    lists = [j for j, c in zip(row.inputs, ch_in) if isinstance(c, list)]
    if kind == "fuse":
        if len(ch_in) < 2 or lists != list(row.inputs[:-1]):
            raise ConfigError(f"{label}: row {row.index} field 'from': CBFuse takes CBLinear rows then the map to add "
                              f"to, e.g. [[10, 11, -1]]; got {row.from_!r}")
        return
    if kind == "index" and not lists:
        raise ConfigError(f"{label}: row {row.index} field 'from': Index picks a map of a Backbone row's list (or a pyramid's), "
                          f"but {row.from_!r} is a single map; point it at the Backbone row")
    if kind != "index" and lists:
        j = lists[0]
        raise ConfigError(f"{label}: row {row.index} field 'from': row {j} ({spec.rows[j].module}) gives a list of "
                          f"feature maps; pick one with an Index row, e.g. [{j}, 1, Index, [0]], and take that")


def _backbone_args(row: Row, args: list[Any], c1: int, label: str) -> tuple[list[Any], dict[str, Any]]:
    """``[model_name]`` or ``[model_name, {keywords}]`` -> Backbone's arguments."""
    if not args or not isinstance(args[0], str) or len(args) > 2 or (len(args) == 2 and not isinstance(args[1], dict)):
        raise ConfigError(f"{label}: row {row.index} field 'args': {row.args!r}: a Backbone row takes [model name] or "
                          f"[model name, {{indices: [1, 2, 3], ...}}], e.g. [swin_tiny_patch4_window7_224]")
    return [args[0], args[1] if len(args) == 2 else None], {"in_channels": c1}


def _pyramid_args(row: Row, args: list[Any], c1: int, spec: DetectorSpec, label: str) -> tuple[list[Any], list[int]]:
    """A SimpleFeaturePyramid row's ``[c2]`` or ``[c2, [scales]]`` -> ``[c1, c2, scales]`` (``c2`` scaled by
    width and capped, as a conv row's) and its list of output channels."""
    c2 = args[0] if args else None
    if (not isinstance(c2, int) or isinstance(c2, bool) or not 1 <= c2 <= MAX_CHANNELS or len(args) > 2
            or (len(args) == 2 and not isinstance(args[1], list))):
        raise ConfigError(f"{label}: row {row.index} field 'args': {row.args!r}: a SimpleFeaturePyramid row takes "
                          f"[channels] or [channels, [scales]], e.g. [256, [2.0, 1.0, 0.5]]")
    c2 = make_divisible(min(c2, spec.max_channels) * spec.width, 8)
    scales = args[1] if len(args) == 2 else [2.0, 1.0, 0.5]
    return [c1, c2, scales], [c2] * len(scales)


def _index_args(row: Row, args: list[Any], maps: list[int], label: str) -> tuple[list[Any], int]:
    """``[i]`` or ultralytics' ``[channels, i]`` -> ([i], the channels of map i)."""
    ints = all(isinstance(a, int) and not isinstance(a, bool) for a in args)
    if not ints or len(args) not in (1, 2):
        raise ConfigError(f"{label}: row {row.index} field 'args': {row.args!r}: an Index row takes [i], the position "
                          f"of a map in its input's list of {len(maps)}")
    i = args[-1]
    if not -len(maps) <= i < len(maps):
        raise ConfigError(f"{label}: row {row.index} field 'args': index {i} is out of range; the input gives "
                          f"{len(maps)} maps (channels {maps}), so use 0..{len(maps) - 1}")
    if len(args) == 2 and args[0] != maps[i]:
        raise ConfigError(f"{label}: row {row.index} field 'args': map {i} has {maps[i]} channels, not {args[0]}; "
                          f"write [{i}] and the channels are taken from the Backbone row")
    return [i], maps[i]


def _split_args(row: Row, args: list[Any], c1: int, label: str) -> tuple[list[Any], list[int]]:
    """CBLinear's ``[[c, ...], *rest]`` -> ``[c1, [c, ...], *rest]`` and its list of output channels."""
    groups = args[0] if args else None
    if (not isinstance(groups, list) or not groups
            or not all(isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= MAX_CHANNELS for c in groups)):
        raise ConfigError(f"{label}: row {row.index} field 'args': {row.module} takes [[channels, ...]], the output "
                          f"channel groups, e.g. [[64, 128]]; got {row.args!r}")
    return [c1, groups, *args[1:]], list(groups)


def _check_fuse(row: Row, args: list[Any], ch_in: list[Any], label: str) -> None:
    """CBFuse's ``[[i, ...]]``: one group index per CBLinear input, each group as wide as the target."""
    idx = args[0] if len(args) == 1 else None
    if not isinstance(idx, list) or len(idx) != len(ch_in) - 1:
        raise ConfigError(f"{label}: row {row.index} field 'args': CBFuse takes [[i, ...]], one group index for each "
                          f"of its {len(ch_in) - 1} CBLinear inputs; got {row.args!r}")
    for j, i, groups in zip(row.inputs, idx, ch_in):
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(groups):
            raise ConfigError(f"{label}: row {row.index} field 'args': group {i!r} of row {j} is out of range (it has "
                              f"{len(groups)} groups)")
        if groups[i] != ch_in[-1]:
            raise ConfigError(f"{label}: row {row.index} field 'args': group {i} of row {j} has {groups[i]} channels, "
                              f"the map it is added to {ch_in[-1]}; pick a group of that width")


def _scale_rules(module: str, args: list[Any], scale: str | None) -> list[Any]:
    """ultralytics' scale-dependent arguments of a conv-like row (``args`` = [c1, c2, n, ...]): at m,
    l and x C3k2's ``c3k`` is forced on; at l and x A2C2f gets ``residual=True, mlp_ratio=1.2``."""
    if module == "C3k2" and scale in ("m", "l", "x"):
        return [*args[:3], True, *args[4:]]
    if module == "A2C2f" and scale in ("l", "x"):
        return [*args, True, 1.2]
    return args


def _head_args(row: Row, args: list[Any], ch_in: list[int], spec: DetectorSpec, spec_m: Any, legacy: bool,
               label: str) -> tuple[list[Any], dict[str, Any]]:
    """A head row ``[nc]`` (or ``[nc, reg_max]``) -> its constructor's arguments. ``reg_max`` and
    ``end2end`` come from the YAML's top level unless the head fixes them (``v10Detect``). A
    segmentation head's row is ``[nc, nm, npr]`` (:func:`_segment_args`)."""
    if spec_m.segment:
        return _segment_args(row, args, ch_in, spec, legacy, label)
    if spec_m.extra:
        return _extra_head_args(row, args, ch_in, spec, spec_m.extra, legacy, label)
    if not args or not isinstance(args[0], int) or isinstance(args[0], bool) or len(args) > 2:
        raise ConfigError(f"{label}: row {row.index} field 'args': {row.module} takes [nc], got {row.args!r}")
    if not spec_m.head_options:
        if len(args) > 1:
            raise ConfigError(f"{label}: row {row.index} field 'args': {row.module} takes [nc] (its reg_max is 16), "
                              f"got {row.args!r}")
        return [args[0], ch_in], {}
    reg_max = args[1] if len(args) > 1 else spec.reg_max
    if not isinstance(reg_max, int) or isinstance(reg_max, bool) or not 1 <= reg_max <= 64:
        raise ConfigError(f"{label}: row {row.index} field 'args': reg_max {reg_max!r} must be 1 to 64")
    return [args[0], reg_max, ch_in], {"legacy": legacy, "end2end": spec.end2end}


def _segment_args(row: Row, args: list[Any], ch_in: list[int], spec: DetectorSpec, legacy: bool,
                  label: str) -> tuple[list[Any], dict[str, Any]]:
    """A segmentation head's ``[nc, nm, npr]`` (``nm`` mask coefficients, default 32; ``npr`` prototype
    channels, default 256, scaled by width and capped like a conv row's output, as ultralytics' parser
    does) -> ``[nc, nm, npr, reg_max, [input channels]]``, reg_max and end2end from the YAML's top level."""
    ints = all(isinstance(a, int) and not isinstance(a, bool) and a >= 1 for a in args)
    if not args or not ints or len(args) > 3:
        raise ConfigError(f"{label}: row {row.index} field 'args': {row.module} takes [nc, nm, npr] (classes, mask "
                          f"coefficients, prototype channels), e.g. [nc, 32, 256]; got {row.args!r}")
    nc, nm, npr = [*args, 32, 256][:3] if len(args) == 1 else [*args, 256][:3]
    if nm > 256 or npr > MAX_CHANNELS:
        raise ConfigError(f"{label}: row {row.index} field 'args': {nm} mask coefficients / {npr} prototype "
                          f"channels is too many (at most 256 / {MAX_CHANNELS}); check the row")
    npr = make_divisible(min(npr, spec.max_channels) * spec.width, 8)
    return [nc, nm, npr, spec.reg_max, ch_in], {"legacy": legacy, "end2end": spec.end2end}


def _extra_head_args(row: Row, args: list[Any], ch_in: list[int], spec: DetectorSpec, extra: str, legacy: bool,
                     label: str) -> tuple[list[Any], dict[str, Any]]:
    """A keypoint head's ``[nc, kpt_shape]`` (default: the YAML's ``kpt_shape``) or an oriented-box head's
    ``[nc, ne]`` (default 1) -> ``[nc, kpt_shape | ne, reg_max, [input channels]]``, reg_max and end2end
    from the YAML's top level, as ultralytics' parser passes them."""
    nc = args[0] if args else None
    if not isinstance(nc, int) or isinstance(nc, bool) or nc < 1 or len(args) > 2:
        form = "[nc, kpt_shape] (e.g. [nc, kpt_shape] with 'kpt_shape: [17, 3]' at the top)" \
            if extra == "keypoints" else "[nc, ne] (classes, angle outputs), e.g. [nc, 1]"
        raise ConfigError(f"{label}: row {row.index} field 'args': {row.module} takes {form}; got {row.args!r}")
    if extra == "keypoints":
        shape = args[1] if len(args) > 1 else spec.kpt_shape
        if shape is None or shape == "kpt_shape":
            raise ConfigError(f"{label}: row {row.index} field 'args': {row.module} needs the keypoint shape; add "
                              "'kpt_shape: [17, 3]' (keypoints, dims) at the top of the YAML or give the data's")
        try:
            value: Any = list(check_kpt_shape(shape))
        except ConfigError as e:
            raise ConfigError(f"{label}: row {row.index} field 'args': {e}") from None
    else:
        value = args[1] if len(args) > 1 else 1
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 8:
            raise ConfigError(f"{label}: row {row.index} field 'args': {row.module}'s angle outputs ne={value!r} "
                              "must be 1 to 8 (1 in the shipped YAMLs)")
    return [nc, value, spec.reg_max, ch_in], {"legacy": legacy, "end2end": spec.end2end}


def _classify_args(row: Row, args: list[Any], c1: int, last: bool, label: str) -> list[Any]:
    """A Classify row's ``[nc]`` or ultralytics' ``[c2, k, s, p, g]`` -> ``[c1, c2, *rest]`` (``c2`` not
    scaled: it is the class count). The head ends the network, so it must be the last row."""
    if not last:
        raise ConfigError(f"{label}: row {row.index} ({row.module}): the classification head gives logits, not a "
                          "map, so it must be the last row; move it to the end of 'head'")
    c2 = args[0] if args else None
    if not isinstance(c2, int) or isinstance(c2, bool) or not 1 <= c2 <= MAX_CHANNELS or len(args) > 5:
        raise ConfigError(f"{label}: row {row.index} field 'args': {row.module} takes [nc] (or [nc, k, s, p, g]), "
                          f"got {row.args!r}")
    return [c1, c2, *args[1:]]


def _resnet_args(row: Row, args: list[Any], c1: int, label: str) -> tuple[list[Any], int]:
    """A ResNetLayer row's ``[c1, c2, s, is_first, n, e]`` (unscaled, as ultralytics builds it) -> the
    same arguments and the row's output channels; ``c1`` must be the input's channel count."""
    ints = [a for i, a in enumerate(args) if i != 3]
    if (not 2 <= len(args) <= 6 or not all(isinstance(a, int) and not isinstance(a, bool) and a >= 1 for a in ints)
            or (len(args) > 3 and not isinstance(args[3], bool)) or max(ints) > MAX_CHANNELS):
        raise ConfigError(f"{label}: row {row.index} field 'args': {row.module} takes [c1, c2, stride, is_first, "
                          f"blocks, expansion], e.g. [64, 64, 1, False, 3]; got {row.args!r}")
    if args[0] != c1:
        raise ConfigError(f"{label}: row {row.index} field 'args': {row.module}'s input has {c1} channels, not "
                          f"{args[0]}; write [{c1}, {', '.join(map(str, args[1:]))}]")
    is_first = bool(args[3]) if len(args) > 3 else False
    e = args[5] if len(args) > 5 else 4
    return list(args), resnet_layer_channels(args[1], is_first, e)


def _torchvision_args(row: Row, args: list[Any], c1: int, label: str
                      ) -> tuple[list[Any], dict[str, Any], int]:
    """A TorchVision row's ``[c2, model, weights, unwrap, truncate, split]`` -> the module's arguments,
    keywords and the declared output channels ``c2`` (checked against the built module)."""
    if (len(args) < 2 or not isinstance(args[0], int) or isinstance(args[0], bool) or not isinstance(args[1], str)
            or len(args) > 6):
        raise ConfigError(f"{label}: row {row.index} field 'args': TorchVision takes [channels, model, weights, "
                          f"unwrap, truncate], e.g. [512, resnet18, null, True, 2]; got {row.args!r}")
    return list(args[1:]), {"in_channels": c1}, args[0]


def _hgnet_args(row: Row, args: list[Any], c1: int, n: int, label: str) -> tuple[list[Any], int]:
    """An HGStem / HGBlock row's ``[cm, c2, *rest]`` (unscaled) -> ``[c1, cm, c2, *rest]``, an HGBlock's
    repeats inserted at position 4 (after ``k``), exactly where ultralytics' parser puts them."""
    head = args[:2]
    if (len(head) < 2 or not all(isinstance(a, int) and not isinstance(a, bool) and 1 <= a <= MAX_CHANNELS
                                 for a in head) or len(args) > 5):
        raise ConfigError(f"{label}: row {row.index} field 'args': {row.module} takes [mid channels, out channels"
                          f"{', k, light, shortcut' if row.module == 'HGBlock' else ''}], e.g. [48, 128"
                          f"{', 3' if row.module == 'HGBlock' else ''}]; got {row.args!r}")
    out = [c1, *args]
    if row.module == "HGBlock":
        out.insert(4, n)
    return out, args[1]


def _decoder_args(row: Row, args: list[Any], ch_in: list[Any], last: bool, label: str) -> list[Any]:
    """An RTDETRDecoder row's ``[nc, hd, nq, ...]`` -> ``[nc, [input channels], hd, nq, ...]``; the head
    ends the network."""
    if not last:
        raise ConfigError(f"{label}: row {row.index} ({row.module}): the decoder gives boxes and scores, not a map, "
                          "so it must be the last row; move it to the end of 'head'")
    if not args or not isinstance(args[0], int) or isinstance(args[0], bool) or len(args) > 14:
        raise ConfigError(f"{label}: row {row.index} field 'args': {row.module} takes [nc] (or [nc, hd, nq, ndp, nh, "
                          f"ndl, ...]), got {row.args!r}")
    if len(args) > 2 and (not isinstance(args[2], int) or isinstance(args[2], bool) or args[2] < 1):
        raise ConfigError(f"{label}: row {row.index} field 'args': {row.module}'s query count nq={args[2]!r} must "
                          "be 1 or more (300 in RT-DETR)")
    return [args[0], list(ch_in), *args[1:]]


def _construct(row: Row, factory: Any, args: list[Any], kwargs: dict[str, Any], label: str) -> nn.Module:
    try:
        return factory(*args, **kwargs)
    except ConfigError as e:
        raise ConfigError(f"{label}: row {row.index} ({row.module}): {e}") from None
    except (TypeError, ValueError, RuntimeError, AssertionError, ZeroDivisionError, IndexError) as e:
        raise ConfigError(f"{label}: row {row.index} field 'args': {row.module} with arguments {args!r} "
                          f"{kwargs or ''} cannot be built ({e}); check the row's arguments") from None


def _set_activation(model: nn.Module, name: str) -> None:
    """Give every Conv that has SiLU the YAML's activation instead."""
    factory = ACTIVATIONS[name]
    for m in model.modules():
        if isinstance(m, Conv) and isinstance(m.act, nn.SiLU):
            m.act = factory()


def build_from_spec(spec: DetectorSpec) -> DetectionModel:
    """Build the model of a checked spec (on the current default device) and probe its strides."""
    label = spec.source
    channels: list[int] = []
    layers: list[nn.Module] = []
    inputs: list[tuple[int, ...]] = []
    multi: list[bool] = []
    info: list[LayerInfo] = []
    legacy = not any(r.module in MODERN_HEAD_ROWS for r in spec.rows)
    image_channels = int(spec.raw.get("channels", spec.raw.get("ch", 3)))
    for row in spec.rows:
        spec_m = MODULES[row.module]
        ch_in = [image_channels if j == -1 else channels[j] for j in row.inputs]
        _check_map_inputs(row, spec, ch_in, spec_m.kind, label)
        args = _substitute(row.args, spec)
        n = max(round(row.repeats * spec.depth), 1) if row.repeats > 1 else row.repeats
        kwargs: dict[str, Any] = {}
        c1 = ch_in[0]
        scaled_repeats = n
        if spec_m.kind == "conv":
            if not args or not isinstance(args[0], int) or isinstance(args[0], bool) or args[0] < 1:
                raise ConfigError(f"{label}: row {row.index} field 'args': {row.module} needs its output channel "
                                  f"count first, e.g. [256], got {row.args!r}")
            if args[0] > MAX_CHANNELS:
                raise ConfigError(f"{label}: row {row.index} field 'args': {args[0]} output channels is more than "
                                  f"{MAX_CHANNELS}; check the row")
            c2 = make_divisible(min(args[0], spec.max_channels) * spec.width, 8)
            args = [c1, c2, *args[1:]]
            if spec_m.repeat:
                args.insert(2, n)
                n = 1
            args = _scale_rules(row.module, args, spec.scale)
            if row.module == "SPPF" and len(args) > 3:  # [c, k, n, ...]: YOLO26's SPPF, cv1 without SiLU
                kwargs = {"cv1_act": False}
        elif spec_m.kind == "concat":
            c2 = sum(ch_in)
        elif spec_m.kind == "split":
            args, c2 = _split_args(row, args, c1, label)
        elif spec_m.kind == "fuse":
            _check_fuse(row, args, ch_in, label)
            c2 = ch_in[-1]
        elif spec_m.kind == "detect":
            args, kwargs = _head_args(row, args, ch_in, spec, spec_m, legacy, label)
            c2 = 0
        elif spec_m.kind == "attention":
            kwargs = _attention_kwargs(row, args, label)
            identity_start = kwargs.get("zero_init", False)
            if not isinstance(identity_start, bool):
                raise ConfigError(f"{label}: row {row.index} field 'args': zero_init: {identity_start!r} must be "
                                  "true or false")
            if "zero_init" not in inspect.signature(spec_m.factory).parameters:
                kwargs.pop("zero_init", None)  # the block cannot start as the identity itself: wrapped below
            else:
                identity_start = False
            args = [c1]
            c2 = c1
        elif spec_m.kind == "backbone":
            args, kwargs = _backbone_args(row, args, c1, label)
        elif spec_m.kind == "pyramid":
            args, c2 = _pyramid_args(row, args, c1, spec, label)
        elif spec_m.kind == "index":
            args, c2 = _index_args(row, args, c1, label)
        elif spec_m.kind == "classify":
            args = _classify_args(row, args, c1, row.index == len(spec.rows) - 1, label)
            c2 = 0
        elif spec_m.kind == "resnet":
            args, c2 = _resnet_args(row, args, c1, label)
        elif spec_m.kind == "torchvision":
            args, kwargs, c2 = _torchvision_args(row, args, c1, label)
        elif spec_m.kind == "hgnet":
            args, c2 = _hgnet_args(row, args, c1, n, label)
            n = 1
        elif spec_m.kind == "encoder":
            args = [c1, *args]
            c2 = c1
        elif spec_m.kind == "rtdetr":
            args = _decoder_args(row, args, ch_in, row.index == len(spec.rows) - 1, label)
            c2 = 0
        else:
            c2 = c1
        if spec_m.kind in ("backbone", "pyramid", "index", "classify", "resnet", "torchvision", "rtdetr") and row.repeats != 1:
            raise ConfigError(f"{label}: row {row.index} field 'repeats': a {row.module} row is built once; write 1")
        modules = [_construct(row, spec_m.factory, args, kwargs, label) for _ in range(n)]
        if spec_m.kind == "attention" and identity_start:
            modules = [IdentityBlend(m) for m in modules]
        if spec_m.kind == "backbone":
            c2 = list(modules[0].channels)
        if spec_m.kind == "torchvision" and modules[0].out_channels != c2:
            raise ConfigError(f"{label}: row {row.index} field 'args': {args[0]} gives {modules[0].out_channels} "
                              f"channels, not {c2}; write {modules[0].out_channels} first")
        layer = modules[0] if n == 1 else nn.Sequential(*modules)
        layers.append(layer)
        inputs.append(row.inputs)
        multi.append(spec_m.kind in MULTI_INPUT_KINDS)
        channels.append(c2)
        info.append(LayerInfo(index=row.index, from_=row.from_, repeats=scaled_repeats, module=row.module,
                              args=[list(a) if isinstance(a, list) else a for a in args], kwargs=kwargs,
                              params=sum(p.numel() for p in layer.parameters()), channels=c2, section=row.section))
    model = DetectionModel(layers, inputs, multi, info, spec)
    model.in_channels = image_channels
    if spec.activation is not None:
        _set_activation(model, spec.activation)
    if model.task == "classify":
        _classifier_norms(model)
    _probe_strides(model, label)
    return model


CLASSIFIER_NORM = {"eps": 1e-5, "momentum": 0.1}
"""Batch-norm settings of a classifier (a Classify head): torch's defaults, as ultralytics' classification
models keep them (only its detection-type models set eps 1e-3, momentum 0.03), so their weights give
the same logits."""


def _classifier_norms(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eps, m.momentum = CLASSIFIER_NORM["eps"], CLASSIFIER_NORM["momentum"]


def _probe_strides(model: DetectionModel, label: str) -> None:
    """Find the head's strides from the map sizes of a zero image's forward (inputs of the last row):
    Detect's (its ``stride`` buffer, then its biases), or RTDETRDecoder's (a plain list; the decoder itself
    needs none: its anchors follow the map sizes)."""
    head = model.model[-1]
    if not isinstance(head, (Detect, RTDETRDecoder)):
        return
    first = next(model.parameters())
    x = torch.zeros(1, model.in_channels, PROBE_SIZE, PROBE_SIZE, device=first.device, dtype=first.dtype)
    was_training = model.training
    model.eval()  # batch-norm statistics stay untouched
    try:
        with torch.no_grad():
            outs = model.forward_rows(x, upto=len(model.model) - 1)
    except RuntimeError as e:
        raise ConfigError(f"{label}: the rows do not fit together ({' '.join(str(e).split())[:300]}); check "
                          "the 'from' indices and channel counts") from None
    finally:
        model.train(was_training)
    strides = [PROBE_SIZE / outs[j].shape[-2] for j in model.inputs[-1]]
    if isinstance(head, RTDETRDecoder):
        head.stride = model.stride = strides
        return
    head.stride.copy_(torch.tensor(strides, device=head.stride.device))
    model.stride = strides
    if first.device.type != "meta":
        head.init_biases(strides)


def build_detector(yaml: str | Path | Mapping[str, Any], *, scale: str | None = None,
                   num_classes: int | None = None, kpt_shape: Sequence[int] | None = None) -> DetectionModel:
    """A detector from a YAML in the ultralytics schema (a path, YAML text or a dict).

    ``scale``: a letter of the file's ``scales`` (default: the letter in the file name, e.g.
    ``yolov8n.yaml``, else the first); ``num_classes`` overrides ``nc``, ``kpt_shape`` a keypoint head's
    ``[keypoints, dims]`` (a keypoint data set's, as ultralytics' ``PoseModel(data_kpt_shape=...)``). Nothing in the YAML is run:
    it is read with ``yaml.safe_load`` and module names come from an allow-list. Build on the meta
    device (``with torch.device("meta"):``) to count parameters and FLOPs without memory.
    """
    return build_from_spec(parse_spec(yaml, scale=scale, num_classes=num_classes, kpt_shape=kpt_shape))
