"""The smallest model of each registered name that keeps what the name is about (its family, patch,
window, prefix tokens, rule), and input sizes that suit it: for tests that run forward passes."""
from __future__ import annotations

import functools

import torch

import vision_attn
from vision_attn.models.convnext import ConvNeXt
from vision_attn.models.hiera import Hiera
from vision_attn.models.resnet import ResNet
from vision_attn.models.sam2_hiera import HieraDet
from vision_attn.models.swin import SwinTransformer
from vision_attn.models.vit import VisionTransformer

# Names the per-name suites leave to another: at the small size (small_kwargs sets width and depth) each
# is built of the same layers as the name that stands for it (a DINOv3 name's q/v biases on or off are
# each run by one of the two DINOv3 names that stand). Their full-size keys, parameter counts and input
# configurations are checked against timm's name by name in test_dinov3.py, test_convnext.py and test_hiera.py.
STANDS_FOR = {
    "vit_small_patch16_dinov3": [f"vit_{s}_patch16_dinov3{q}" for s in ("small", "base", "large")
                                 for q in ("", "_qkvb")] + ["vit_tiny_patch16_dinov3_qkvb"],
    "vit_small_plus_patch16_dinov3_qkvb": [f"vit_{s}_patch16_dinov3{q}" for s in ("small_plus", "huge_plus")
                                           for q in ("", "_qkvb")] + ["vit_7b_patch16_dinov3"],
    "convnext_atto": ["convnext_femto", "convnext_pico", "convnext_nano"],  # 1x1-convolution MLPs
    "convnext_tiny": ["convnext_small", "convnext_base", "convnext_large"],
    # abswin's embedding, layer scale and pooled widening: against timm in test_hiera.py, at two sizes
    "hiera_tiny_224": [f"hiera_{s}_224" for s in ("small", "base", "base_plus", "large", "huge")]
                      + ["hiera_small_abswin_256", "hiera_base_abswin_256"],
    "sam2_hiera_tiny": ["sam2_hiera_small", "sam2_hiera_base_plus", "sam2_hiera_large", "hieradet_small"],
    "naflexvit_base_patch16_siglip": ["naflexvit_so400m_patch16_siglip"],  # SigLIP 2: the same tower, wider
}
STOOD_FOR = {n for rep, names in STANDS_FOR.items() for n in names if n != rep}
ALL_NAMES = [n for n in vision_attn.list_models() if n not in STOOD_FOR]
HIERA_SIZE = (64, 96)


@functools.cache
def family(name: str) -> type:
    with torch.device("meta"):
        return type(vision_attn.create_model(name))


@functools.cache
def _patch(name: str) -> int:
    with torch.device("meta"):
        return vision_attn.create_model(name).patch_embed.patch_size[0]


def small_kwargs(name: str) -> dict:
    """Overrides that shrink ``name``: 2 ViT blocks of width 48, Swin stages of (2, 1, 1, 1) blocks of
    width 16 (the first stage has a shifted block); ConvNeXts of stages (1, 1, 2, 1) blocks, 16 to 40
    channels (the name's block kind kept); Hieras of stages (1, 1, 2, 1) from width 16 (Hiera at
    64x96, the size it is built for; SAM 2's windows shrunk to 8, 4, 2 tokens); ResNets of their depth, the bottlenecks narrower inside (the
    levels' channels unchanged), run at small inputs."""
    kind = family(name)
    if issubclass(kind, VisionTransformer):
        return dict(depth=2, embed_dim=48, num_heads=3, img_size=4 * _patch(name), num_classes=5)
    if issubclass(kind, SwinTransformer):
        return dict(depths=(2, 1, 1, 1), embed_dim=16, num_heads=(1, 1, 2, 2), num_classes=5, drop_path_rate=0.0)
    if issubclass(kind, ConvNeXt):
        return dict(depths=(1, 1, 2, 1), dims=(16, 24, 32, 40), num_classes=5)
    if issubclass(kind, Hiera):  # built for one size: 2x3 mask units of 8x8 tokens
        return dict(embed_dim=16, stages=(1, 1, 2, 1), img_size=HIERA_SIZE, num_classes=5)
    if issubclass(kind, HieraDet):  # windows of 8, 4, 2 tokens; block 3 global
        return dict(embed_dim=16, stages=(1, 1, 2, 1), window_spec=(8, 4, 2, 2), global_att_blocks=(3,), num_classes=5)
    assert issubclass(kind, ResNet), kind
    if name in ("resnet18", "resnet34"):
        return dict(num_classes=5)
    return dict(num_classes=5, width_per_group=16)  # bottlenecks a quarter as wide inside; the same levels


def small_model(name: str, **extra) -> torch.nn.Module:
    return vision_attn.create_model(name, **{**small_kwargs(name), **extra})


def input_sizes(name: str) -> list[tuple[int, int]]:
    """Two image sizes (the second not square) that every level divides evenly; a Hiera, built for one
    size (its mask units and token order are fixed when it is built, as timm's), runs that one twice."""
    if issubclass(family(name), VisionTransformer):
        p = _patch(name)
        return [(4 * p, 4 * p), (3 * p, 5 * p)]
    if issubclass(family(name), (SwinTransformer, HieraDet)):
        return [(64, 64), (96, 128)]
    if issubclass(family(name), Hiera):
        return [HIERA_SIZE, HIERA_SIZE]
    return [(32, 32), (64, 96)]
