"""The smallest model of each registered name that keeps what the name is about (its family, patch,
window, prefix tokens, rule), and input sizes that suit it: for tests that run forward passes."""
from __future__ import annotations

import functools

import torch

import vision_attn
from vision_attn.models.convnext import ConvNeXt
from vision_attn.models.resnet import ResNet
from vision_attn.models.swin import SwinTransformer
from vision_attn.models.vit import VisionTransformer

# Names the per-name suites leave to another: at the small size (small_kwargs sets width and depth) each
# is built of the same layers as the name that stands for it (a DINOv3 name's q/v biases on or off are
# each run by one of the two DINOv3 names that stand). Their full-size keys, parameter counts and input
# configurations are checked against timm's name by name in test_dinov3.py and test_convnext.py.
STANDS_FOR = {
    "vit_small_patch16_dinov3": [f"vit_{s}_patch16_dinov3{q}" for s in ("small", "base", "large")
                                 for q in ("", "_qkvb")] + ["vit_tiny_patch16_dinov3_qkvb"],
    "vit_small_plus_patch16_dinov3_qkvb": [f"vit_{s}_patch16_dinov3{q}" for s in ("small_plus", "huge_plus")
                                           for q in ("", "_qkvb")] + ["vit_7b_patch16_dinov3"],
    "convnext_atto": ["convnext_femto", "convnext_pico", "convnext_nano"],  # 1x1-convolution MLPs
    "convnext_tiny": ["convnext_small", "convnext_base", "convnext_large"],
    "naflexvit_base_patch16_siglip": ["naflexvit_so400m_patch16_siglip"],  # SigLIP 2: the same tower, wider
}
STOOD_FOR = {n for rep, names in STANDS_FOR.items() for n in names if n != rep}
ALL_NAMES = [n for n in vision_attn.list_models() if n not in STOOD_FOR]


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
    channels (the name's block kind kept); ResNets of their depth, the bottlenecks narrower inside (the
    levels' channels unchanged), run at small inputs."""
    kind = family(name)
    if issubclass(kind, VisionTransformer):
        return dict(depth=2, embed_dim=48, num_heads=3, img_size=4 * _patch(name), num_classes=5)
    if issubclass(kind, SwinTransformer):
        return dict(depths=(2, 1, 1, 1), embed_dim=16, num_heads=(1, 1, 2, 2), num_classes=5, drop_path_rate=0.0)
    if issubclass(kind, ConvNeXt):
        return dict(depths=(1, 1, 2, 1), dims=(16, 24, 32, 40), num_classes=5)
    assert issubclass(kind, ResNet), kind
    if name in ("resnet18", "resnet34"):
        return dict(num_classes=5)
    return dict(num_classes=5, width_per_group=16)  # bottlenecks a quarter as wide inside; the same levels


def small_model(name: str, **extra) -> torch.nn.Module:
    return vision_attn.create_model(name, **{**small_kwargs(name), **extra})


def input_sizes(name: str) -> list[tuple[int, int]]:
    """Two image sizes (the second not square) that every level divides evenly."""
    if issubclass(family(name), VisionTransformer):
        p = _patch(name)
        return [(4 * p, 4 * p), (3 * p, 5 * p)]
    if issubclass(family(name), SwinTransformer):
        return [(64, 64), (96, 128)]
    return [(32, 32), (64, 96)]
