"""The classification head of ultralytics' -cls YAMLs (``[-1, 1, Classify, [nc]]``).

A 1x1 :class:`~vision_attn.models.yolo.conv.Conv` widens the last map to 1280 channels (EfficientNet-B0's
width), global average pooling and dropout make a vector of it, a linear layer gives the class logits.
State-dict keys equal ultralytics' (``conv.*``, ``linear.*``), so its weights load unchanged.

Unlike ultralytics' head (whose eval output is ``(softmax, logits)``), this one returns the logits
(B, nc) in training and in eval, as every classifier of vision_attn (and timm) does.
"""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.models.yolo.conv import Conv

__all__ = ["Classify", "CLASSIFY_WIDTH"]

CLASSIFY_WIDTH = 1280
"""Channels of the head's convolution (and the features its linear layer sees)."""


class Classify(nn.Module):
    """(B, c1, H, W), or a list of maps concatenated on channels -> logits (B, c2).

    ``c2``: the class count (never scaled by the YAML's width); ``k``, ``s``, ``p``, ``g``: the
    convolution's kernel, stride, padding and groups; ``dropout``: before the linear layer (0: none).
    """

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, p: int | None = None, g: int = 1,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.nc = c2
        self.conv = Conv(c1, CLASSIFY_WIDTH, k, s, p, g)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.drop = nn.Dropout(p=dropout)
        self.linear = nn.Linear(CLASSIFY_WIDTH, c2)

    @property
    def num_features(self) -> int:
        """Width of the pooled features the linear layer classifies."""
        return self.linear.in_features

    def features(self, x: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
        """The pooled features (B, 1280) before dropout and the linear layer."""
        if isinstance(x, (list, tuple)):
            x = torch.cat(list(x), 1)
        return self.pool(self.conv(x)).flatten(1)

    def forward(self, x: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
        return self.linear(self.drop(self.features(x)))  # (B, nc)
