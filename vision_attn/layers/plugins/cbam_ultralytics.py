"""CBAM in the form ultralytics ships (``ultralytics.nn.modules.conv.CBAM``), for its YAMLs and weights.

It differs from the paper's :class:`~vision_attn.layers.plugins.CBAM`: channel attention is a single
1x1 convolution with bias (C -> C) over the average-pooled descriptor (no reduction, no max pooling);
spatial attention is a k x k convolution without bias and without norm. Structure, parameter count
(65,890 at 256 channels) and state-dict keys (``channel_attention.fc.*``, ``spatial_attention.cv1.*``)
are ultralytics', so weights move between the two unchanged.
"""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.layers.plugins.checks import check_channels, check_kernel_size, check_nchw


class UltralyticsChannelAttention(nn.Module):
    """``x * sigmoid(fc(mean_hw(x)))``, ``fc`` a 1x1 convolution C -> C with bias.

    (B, C, H, W) -> (B, C, H, W); the gate (:meth:`attention`) is (B, C, 1, 1), in (0, 1).
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        check_channels(channels, type(self).__name__)
        self.channels = channels
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Conv2d(channels, channels, 1, bias=True)
        self.act = nn.Sigmoid()

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(self.pool(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_nchw(x, self.channels, type(self).__name__)
        return x * self.attention(x)


class UltralyticsSpatialAttention(nn.Module):
    """``x * sigmoid(cv1([mean_c(x), max_c(x)]))``, ``cv1`` a k x k convolution 2 -> 1 without bias.

    (B, C, H, W) -> (B, C, H, W); the gate (:meth:`attention`) is (B, 1, H, W), in (0, 1).
    """

    def __init__(self, kernel_size: int = 7) -> None:
        super().__init__()
        check_kernel_size(kernel_size, type(self).__name__)
        self.cv1 = nn.Conv2d(2, 1, kernel_size, padding=kernel_size // 2, bias=False)
        self.act = nn.Sigmoid()

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.cv1(torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], dim=1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_nchw(x, None, type(self).__name__)
        return x * self.attention(x)


class UltralyticsCBAM(nn.Module):
    """ultralytics' CBAM: :class:`UltralyticsChannelAttention` then :class:`UltralyticsSpatialAttention`.

    (B, C, H, W) -> (B, C, H, W). :meth:`attention` returns the channel gate (B, C, 1, 1) and the
    spatial gate (B, 1, H, W) of the channel-refined map, each in (0, 1). The arguments are
    ultralytics' ``CBAM(c1, kernel_size=7)``, positional as there, so YAML rows port unchanged
    (ultralytics accepts only kernel sizes 3 and 7; any odd size works here).
    """

    def __init__(self, channels: int, kernel_size: int = 7) -> None:
        super().__init__()
        self.channel_attention = UltralyticsChannelAttention(channels)
        self.spatial_attention = UltralyticsSpatialAttention(kernel_size)
        self.channels = channels

    def attention(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        channel_gate = self.channel_attention.attention(x)
        return channel_gate, self.spatial_attention.attention(x * channel_gate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_nchw(x, self.channels, type(self).__name__)
        return self.spatial_attention(self.channel_attention(x))
