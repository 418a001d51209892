"""A pair of Swin blocks on a feature map, as a detector row (``[-1, 1, SwinBlock, []]``)."""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers.swin_block import WINDOW_RULES, SwinBlock
from vision_attn.layers.window_attention import ShiftedWindows

__all__ = ["MapSwin"]


class MapSwin(nn.Module):
    """Two Swin blocks, regular then shifted windows, on a (B, C, H, W) map -> (B, C, H, W).

    The map is permuted to NHWC for the blocks and back. A map that is not a window multiple is
    padded at the bottom and right inside each block, as in a Swin stage. A detector row has no
    configured resolution, so the default ``window_rule`` is torchvision's: the window is fixed and the
    shift is dropped along a dimension the window covers once padded (small maps of large strides get
    one window and no shift). ``window_rule="timm"`` keeps the shift as given. ``num_heads`` defaults
    to C / 32 (C / 8 when 32 does not divide C).
    """

    def __init__(self, channels: int, num_heads: int | None = None, window_size: int = 7, mlp_ratio: float = 4.0,
                 window_rule: str = "torchvision") -> None:
        super().__init__()
        heads = num_heads or (channels // 32 if channels % 32 == 0 else max(channels // 8, 1))
        if channels % heads:
            raise ConfigError(f"SwinBlock: {channels} channels do not split into {heads} heads; "
                              "give num_heads that divides the channel count")
        if window_rule not in WINDOW_RULES:
            raise ConfigError(f"SwinBlock: window_rule={window_rule!r}: choose one of {sorted(WINDOW_RULES)}")
        if not isinstance(window_size, int) or isinstance(window_size, bool) or window_size < 1:
            raise ConfigError(f"SwinBlock: window_size={window_size!r}: give a positive integer")
        self.channels = channels
        rule = WINDOW_RULES[window_rule]()
        windows = ShiftedWindows()  # gather orders and region masks, shared by the pair
        shift = window_size // 2
        self.blocks = nn.Sequential(*(
            SwinBlock(channels, heads, window_size, (0, 0) if i == 0 else (shift, shift), mlp_ratio=mlp_ratio,
                      rule=rule, windows=windows)
            for i in range(2)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).contiguous()  # NCHW -> NHWC -> NCHW
