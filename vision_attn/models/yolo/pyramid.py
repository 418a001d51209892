"""ViTDet's simple feature pyramid (Li et al. 2022) as a detector row: one stride-16 map of a plain
ViT -> maps at several strides, for a multi-scale head.

``[-1, 1, SimpleFeaturePyramid, [256]]`` takes one map (B, C, H, W), e.g. an ``Index`` row of a ViT
``Backbone`` row, and returns a list of maps (B, 256, H * s, W * s), one per scale ``s`` of
``[2.0, 1.0, 0.5]`` (the default: strides 8, 16, 32 from a stride-16 map); ``Index`` rows pick them.
Each scale resamples the map, then a 1x1 and a 3x3 convolution, each without bias and followed by a
LayerNorm over the channels, as ViTDet's:

- 4.0: a 2x2 stride-2 transposed convolution to C/2, LayerNorm, GELU, another to C/4;
- 2.0: one 2x2 stride-2 transposed convolution to C/2;
- 1.0: the map itself;
- 0.5: 2x2 max pooling.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers.convnext_block import LayerNorm2d

__all__ = ["SimpleFeaturePyramid", "PYRAMID_SCALES"]

PYRAMID_SCALES = (4.0, 2.0, 1.0, 0.5)
"""The scales a pyramid level may take (ViTDet's)."""


def _resample(c1: int, scale: float) -> tuple[list[nn.Module], int]:
    """The layers that bring a map to ``scale`` times its size, and their output channels."""
    if scale == 4.0:
        return [nn.ConvTranspose2d(c1, c1 // 2, 2, 2), LayerNorm2d(c1 // 2, eps=1e-6), nn.GELU(),
                nn.ConvTranspose2d(c1 // 2, c1 // 4, 2, 2)], c1 // 4
    if scale == 2.0:
        return [nn.ConvTranspose2d(c1, c1 // 2, 2, 2)], c1 // 2
    if scale == 0.5:
        return [nn.MaxPool2d(2, 2)], c1
    return [], c1


class SimpleFeaturePyramid(nn.Module):
    """(B, c1, H, W) -> list of (B, c2, H * s, W * s), one per ``scales`` entry (see the module)."""

    def __init__(self, c1: int, c2: int, scales: Sequence[float] = (2.0, 1.0, 0.5)) -> None:
        super().__init__()
        if (not isinstance(scales, (list, tuple)) or not scales or len(set(scales)) != len(scales)
                or any(isinstance(s, bool) or s not in PYRAMID_SCALES for s in scales)):
            raise ConfigError(f"SimpleFeaturePyramid: scales={scales!r}: give distinct scales of "
                              f"{list(PYRAMID_SCALES)}, e.g. [2.0, 1.0, 0.5] (strides 8, 16, 32 from a stride-16 map)")
        if c1 < 4 and 4.0 in scales:
            raise ConfigError(f"SimpleFeaturePyramid: scale 4.0 needs an input of 4 channels or more, not {c1}")
        stages = []
        for s in scales:
            layers, c = _resample(c1, float(s))
            stages.append(nn.Sequential(*layers, nn.Conv2d(c, c2, 1, bias=False), LayerNorm2d(c2, eps=1e-6),
                                        nn.Conv2d(c2, c2, 3, padding=1, bias=False), LayerNorm2d(c2, eps=1e-6)))
        self.stages = nn.ModuleList(stages)
        self.scales = [float(s) for s in scales]
        self.channels = [c2] * len(scales)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [stage(x) for stage in self.stages]

    def extra_repr(self) -> str:
        return f"scales={self.scales}, channels={self.channels}"
