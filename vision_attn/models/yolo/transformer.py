"""A Transformer block over a flattened feature map, as a detector row (``[-1, 1, TransformerBlock, []]``)."""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers.block import Block

__all__ = ["MapTransformer"]


class MapTransformer(nn.Module):
    """``depth`` pre-norm ViT blocks over the H*W positions of a (B, C, H, W) map -> (B, C, H, W).

    No position embedding: a detector sees many image sizes, and its convolutions already carry
    position. ``num_heads`` defaults to C / 32 (C / 8 when 32 does not divide C).
    """

    def __init__(self, channels: int, num_heads: int | None = None, mlp_ratio: float = 2.0, depth: int = 1) -> None:
        super().__init__()
        heads = num_heads or (channels // 32 if channels % 32 == 0 else max(channels // 8, 1))
        if channels % heads:
            raise ConfigError(f"TransformerBlock: {channels} channels do not split into {heads} heads; "
                              "give num_heads that divides the channel count")
        self.channels = channels
        self.blocks = nn.Sequential(*(Block(channels, heads, mlp_ratio=mlp_ratio) for _ in range(depth)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        tokens = self.blocks(x.flatten(2).transpose(1, 2))  # (B, H*W, C)
        return tokens.transpose(1, 2).reshape(b, c, h, w)
