"""The allow-list of module names a detector YAML may use, and how each row's channels are inferred.

A name is looked up here and nowhere else (never in a module's globals), so a YAML can only build
these classes. Kinds:

- ``conv``: the first argument is the output channel count, scaled by width and capped; the module
  receives ``[c_in, c_out, *rest]``. ``repeat`` modules also receive the row's repeats as their third
  argument (and the row itself is built once).
- ``concat``: output channels are the sum of the inputs'.
- ``detect``: receives ``[nc, reg_max, [input channels]]`` and the keywords ``legacy`` and
  ``end2end`` (``head_options``), or only ``[nc, [input channels]]`` (a head that fixes them). A
  segmentation head (``segment``) takes the row's ``[nc, nm, npr]`` (mask coefficients, prototype
  channels; ``npr`` scaled by width and capped like a channel count) and receives
  ``[nc, nm, npr, reg_max, [input channels]]`` and the same keywords. A keypoint head (``extra``
  ``"keypoints"``) takes ``[nc, kpt_shape]`` (``kpt_shape`` the YAML's top-level ``[K, D]``, or the data's)
  and receives ``[nc, (K, D), reg_max, [input channels]]``; an oriented-box head (``extra`` ``"angle"``)
  takes ``[nc, ne]`` (``ne`` angle outputs, 1) and receives ``[nc, ne, reg_max, [input channels]]``.
- ``attention``: a plug-in block built for the input's channels; the row needs no channel arguments
  (``[-1, 1, CBAM, []]``); output channels = input channels.
- ``plain``: arguments passed unchanged, output channels = input channels (``nn.Upsample``,
  ``nn.MaxPool2d``, ``nn.ZeroPad2d``, ``nn.Identity``).
- ``split``: CBLinear: ``[c2s, *rest]``, a list of output channel groups (not scaled, as in
  ultralytics); its output is a tuple of maps.
- ``fuse``: CBFuse: takes several CBLinear rows then a target map; output channels = the target's.
- ``backbone``: a registered model by name (``[swin_tiny_patch4_window7_224, {indices: [1, 2, 3]}]``);
  its output is a list of feature maps whose channel counts the module reports.
- ``pyramid``: SimpleFeaturePyramid ``[c2]`` or ``[c2, [scales]]``: one map (a ViT's stride-16 map) to a
  list of maps, one per scale (default ``[2.0, 1.0, 0.5]``), each ``c2`` channels (scaled by width and
  capped like a conv row's output).
- ``index``: picks one map of a backbone or pyramid row's list (``[2]``, or ultralytics' ``[channels, 2]``).
- ``classify``: the classification head, the last row: ``[nc]`` or ultralytics' ``[c2, k, s, p, g]``;
  receives ``[c_in, c2, *rest]`` (``c2``, the class count, is not scaled by width); no map follows it.
- ``resnet``: ResNetLayer ``[c1, c2, s, is_first, n, e]`` as written (not scaled, as in ultralytics);
  ``c1`` must equal the input's channels; output channels ``c2`` (stem) or ``e * c2`` (a stage).
- ``torchvision``: ultralytics' TorchVision ``[c2, model, weights, unwrap, truncate]``: a torchvision
  ResNet as one row (:mod:`~vision_attn.models.yolo.torchvision_row`); ``c2`` is checked.
- ``hgnet``: HGStem / HGBlock ``[cm, c2, *rest]`` as written (not scaled, as in ultralytics); the module
  receives ``[c_in, cm, c2, *rest]``, an HGBlock also its row's repeats inserted at position 4 (its
  convolution count; the row is built once); output channels ``c2``.
- ``encoder``: AIFI ``[c_ffn, heads, ...]``: the module receives ``[c_in, *args]``; output channels = input's.
- ``rtdetr``: RTDETRDecoder ``[nc, hd, nq, ...]``, the last row: receives ``[nc, [input channels], hd, nq, ...]``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn

from vision_attn.layers.plugins import CBAM, ECA, CoordAttention, SqueezeExcite, UltralyticsCBAM
from vision_attn.models.yolo.area_attention import A2C2f, AreaAttention
from vision_attn.models.yolo.backbone import Backbone, Index
from vision_attn.models.yolo.blocks import C2, C2f, C3, C3k, C3k2, SPP, SPPF, Bottleneck, Concat
from vision_attn.models.yolo.classify import Classify
from vision_attn.models.yolo.composite import CBFuse, CBLinear
from vision_attn.models.yolo.conv import Conv, DWConv
from vision_attn.models.yolo.detect import Detect, V10Detect
from vision_attn.models.yolo.elan import ELAN1, SPPELAN, AConv, ADown, RepNCSPELAN4
from vision_attn.models.yolo.ghost import C3Ghost, GhostBottleneck, GhostConv
from vision_attn.models.yolo.hgnet import HGBlock, HGStem
from vision_attn.models.yolo.psa import C2PSA, PSA
from vision_attn.models.yolo.pyramid import SimpleFeaturePyramid
from vision_attn.models.yolo.resnet_rows import ResNetLayer
from vision_attn.models.yolo.obb import OBB, OBB26
from vision_attn.models.yolo.pose import Pose, Pose26
from vision_attn.models.yolo.rtdetr import AIFI, RepC3
from vision_attn.models.yolo.rtdetr_decoder import RTDETRDecoder
from vision_attn.models.yolo.torchvision_row import TorchVision
from vision_attn.models.yolo.segment import Segment, Segment26
from vision_attn.models.yolo.swin import MapSwin
from vision_attn.models.yolo.transformer import MapTransformer
from vision_attn.models.yolo.v10 import C2fCIB, SCDown

__all__ = ["ModuleSpec", "MODULES", "ATTENTION_ROWS", "ACTIVATIONS"]


@dataclass(frozen=True)
class ModuleSpec:
    """How the builder treats one allowed module name."""

    factory: Callable[..., nn.Module]
    kind: str  # conv | concat | detect | classify | resnet | torchvision | attention | plain | split | fuse
    # | backbone | pyramid | index | hgnet | encoder | rtdetr
    repeat: bool = False  # the row's repeats go into the module (third argument)
    head_options: bool = True  # a detect row: the YAML's reg_max / end2end / legacy reach the head
    segment: bool = False  # a detect row of a segmentation head: args [nc, nm, npr]
    extra: str = ""  # a detect row of a keypoint ("keypoints": [nc, kpt_shape]) or oriented-box head ("angle": [nc, ne])


MODULES: dict[str, ModuleSpec] = {
    "Conv": ModuleSpec(Conv, "conv"),
    "DWConv": ModuleSpec(DWConv, "conv"),
    "Bottleneck": ModuleSpec(Bottleneck, "conv"),
    "C2": ModuleSpec(C2, "conv", repeat=True),
    "C2f": ModuleSpec(C2f, "conv", repeat=True),
    "C3": ModuleSpec(C3, "conv", repeat=True),
    "C3k": ModuleSpec(C3k, "conv", repeat=True),
    "C3k2": ModuleSpec(C3k2, "conv", repeat=True),
    "C2PSA": ModuleSpec(C2PSA, "conv", repeat=True),
    "SPP": ModuleSpec(SPP, "conv"),
    "SPPF": ModuleSpec(SPPF, "conv"),
    "GhostConv": ModuleSpec(GhostConv, "conv"),
    "GhostBottleneck": ModuleSpec(GhostBottleneck, "conv"),
    "C3Ghost": ModuleSpec(C3Ghost, "conv", repeat=True),
    "RepNCSPELAN4": ModuleSpec(RepNCSPELAN4, "conv"),
    "ELAN1": ModuleSpec(ELAN1, "conv"),
    "SPPELAN": ModuleSpec(SPPELAN, "conv"),
    "ADown": ModuleSpec(ADown, "conv"),
    "AConv": ModuleSpec(AConv, "conv"),
    "CBLinear": ModuleSpec(CBLinear, "split"),
    "CBFuse": ModuleSpec(CBFuse, "fuse"),
    "nn.ConvTranspose2d": ModuleSpec(nn.ConvTranspose2d, "conv"),
    "Concat": ModuleSpec(Concat, "concat"),
    "PSA": ModuleSpec(PSA, "conv"),
    "SCDown": ModuleSpec(SCDown, "conv"),
    "C2fCIB": ModuleSpec(C2fCIB, "conv", repeat=True),
    "A2C2f": ModuleSpec(A2C2f, "conv", repeat=True),
    "Detect": ModuleSpec(Detect, "detect"),
    "v10Detect": ModuleSpec(V10Detect, "detect", head_options=False),
    "Classify": ModuleSpec(Classify, "classify"),
    "ResNetLayer": ModuleSpec(ResNetLayer, "resnet"),
    "TorchVision": ModuleSpec(TorchVision, "torchvision"),
    "Segment": ModuleSpec(Segment, "detect", segment=True),
    "Segment26": ModuleSpec(Segment26, "detect", segment=True),
    "Pose": ModuleSpec(Pose, "detect", extra="keypoints"),
    "Pose26": ModuleSpec(Pose26, "detect", extra="keypoints"),
    "OBB": ModuleSpec(OBB, "detect", extra="angle"),
    "OBB26": ModuleSpec(OBB26, "detect", extra="angle"),
    # RT-DETR: PP-HGNetV2 backbone rows, the AIFI encoder layer, RepC3, the decoder head
    "HGStem": ModuleSpec(HGStem, "hgnet"),
    "HGBlock": ModuleSpec(HGBlock, "hgnet", repeat=True),
    "AIFI": ModuleSpec(AIFI, "encoder"),
    "RepC3": ModuleSpec(RepC3, "conv", repeat=True),
    "RTDETRDecoder": ModuleSpec(RTDETRDecoder, "rtdetr"),
    "nn.Upsample": ModuleSpec(nn.Upsample, "plain"),
    "Upsample": ModuleSpec(nn.Upsample, "plain"),
    "nn.MaxPool2d": ModuleSpec(nn.MaxPool2d, "plain"),
    "nn.ZeroPad2d": ModuleSpec(nn.ZeroPad2d, "plain"),
    "nn.Identity": ModuleSpec(nn.Identity, "plain"),
    # attention plug-ins: channels come from the input
    "CBAM": ModuleSpec(UltralyticsCBAM, "attention"),  # ultralytics' form, so its YAMLs port unchanged
    "CBAMPaper": ModuleSpec(CBAM, "attention"),  # the paper's CBAM (MLP with reduction, avg + max pooling)
    "SE": ModuleSpec(SqueezeExcite, "attention"),
    "ECA": ModuleSpec(ECA, "attention"),
    "CoordAtt": ModuleSpec(CoordAttention, "attention"),
    "TransformerBlock": ModuleSpec(MapTransformer, "attention"),  # ViT blocks over the flattened map
    "SwinBlock": ModuleSpec(MapSwin, "attention"),  # regular + shifted window Swin blocks on the map
    "AreaAttention": ModuleSpec(AreaAttention, "attention"),  # YOLO12's area-attention block (ABlock)
    # a create_model network's feature maps, and the row that picks one of them
    "Backbone": ModuleSpec(Backbone, "backbone"),
    "Index": ModuleSpec(Index, "index"),
    "SimpleFeaturePyramid": ModuleSpec(SimpleFeaturePyramid, "pyramid"),  # ViTDet's: one map -> a list of maps
}
"""Module name in a YAML row -> :class:`ModuleSpec`."""

ATTENTION_ROWS = tuple(k for k, v in MODULES.items() if v.kind == "attention")

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "nn.SiLU()": nn.SiLU,
    "nn.ReLU()": nn.ReLU,
    "nn.ReLU6()": nn.ReLU6,
    "nn.GELU()": nn.GELU,
    "nn.Hardswish()": nn.Hardswish,
    "nn.Mish()": nn.Mish,
    "nn.ELU()": nn.ELU,
    "nn.SELU()": nn.SELU,
    "nn.Identity()": nn.Identity,
    "nn.LeakyReLU()": nn.LeakyReLU,
    "nn.LeakyReLU(0.1)": lambda: nn.LeakyReLU(0.1),
}
"""The ``activation:`` strings a YAML may give (ultralytics spells them as constructor calls; they are
matched as text, never run). Also accepted as ``torch.nn.ReLU()`` (yolov6.yaml's spelling) and without
``nn.`` and ``()``, e.g. ``ReLU``."""
