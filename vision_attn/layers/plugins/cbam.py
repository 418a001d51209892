"""CBAM (Woo et al., ECCV 2018): channel attention, then spatial attention.

Channel attention is a shared MLP over the average- and max-pooled descriptors; spatial attention is a
7x7 convolution over the channel-wise average and max maps. The defaults follow the authors' code,
which gives the paper's counts (ResNet-50 + CBAM: 28.09 M parameters): the MLP has biases and the
spatial convolution (without bias) is followed by batch norm. ``CBAM(c, bias=False)`` is timm's
``CbamModule``; ``CBAM(c, spatial_norm=None)`` is the bare equations of the paper.
"""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.layers.plugins.checks import check_kernel_size, check_nchw
from vision_attn.layers.plugins.se import SqueezeExcite


class ChannelAttention(SqueezeExcite):
    """``x * sigmoid(mlp(avg_hw(x)) + mlp(max_hw(x)))`` with ``mlp = fc2(act(fc1(.)))`` shared.

    Squeeze-and-Excitation's layers and keys with a second, max-pooled descriptor through the same
    MLP; the reduced width is not rounded by default (``divisor=1``), as in the authors' code.
    (B, C, H, W) -> (B, C, H, W); the gate (:meth:`attention`) is (B, C, 1, 1), in (0, 1).
    """

    def __init__(self, channels: int, *, reduction: float = 16, divisor: int = 1, **kwargs) -> None:
        super().__init__(channels, reduction=reduction, divisor=divisor, **kwargs)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """The channel gate, (B, C, 1, 1)."""
        pooled = torch.cat([x.mean((2, 3), keepdim=True), x.amax((2, 3), keepdim=True)])  # (2B, C, 1, 1)
        avg, mx = self.fc2(self.act(self.fc1(pooled))).chunk(2)
        return self.gate(avg + mx)


class SpatialAttention(nn.Module):
    """``x * sigmoid(norm(conv([mean_c(x), max_c(x)])))``: a k x k convolution (no bias) from the two
    channel-wise maps to one, then an optional norm (``norm_layer=None``: none).

    (B, C, H, W) -> (B, C, H, W); the gate (:meth:`attention`) is (B, 1, H, W), in (0, 1).
    """

    def __init__(
        self,
        kernel_size: int = 7,
        *,
        norm_layer: type[nn.Module] | None = nn.BatchNorm2d,
        gate_layer: type[nn.Module] = nn.Sigmoid,
    ) -> None:
        super().__init__()
        check_kernel_size(kernel_size, type(self).__name__)
        self.conv = nn.Conv2d(2, 1, kernel_size, padding=kernel_size // 2, bias=False)
        self.norm = norm_layer(1) if norm_layer is not None else nn.Identity()
        self.gate = gate_layer()

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """The spatial gate, (B, 1, H, W)."""
        maps = torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], dim=1)  # (B, 2, H, W)
        return self.gate(self.norm(self.conv(maps)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_nchw(x, None, type(self).__name__)
        return x * self.attention(x)


class CBAM(nn.Module):
    """Convolutional Block Attention Module: :class:`ChannelAttention` then :class:`SpatialAttention`.

    (B, C, H, W) -> (B, C, H, W). :meth:`attention` returns both gates, (B, C, 1, 1) and
    (B, 1, H, W), each in (0, 1); the spatial gate is computed on the channel-refined map.
    ``divisor`` rounds the reduced width as in :class:`~vision_attn.layers.plugins.SqueezeExcite`
    (1: ``channels / reduction`` rounded). Keys: ``channel.fc1/fc2``, ``spatial.conv/norm``.
    """

    def __init__(
        self,
        channels: int,
        *,
        reduction: float = 16,
        divisor: int = 1,
        rd_channels: int | None = None,
        kernel_size: int = 7,
        bias: bool = True,
        spatial_norm: type[nn.Module] | None = nn.BatchNorm2d,
        act_layer: type[nn.Module] = nn.ReLU,
        gate_layer: type[nn.Module] = nn.Sigmoid,
    ) -> None:
        super().__init__()
        self.channel = ChannelAttention(channels, reduction=reduction, divisor=divisor, rd_channels=rd_channels,
                                        bias=bias, act_layer=act_layer, gate_layer=gate_layer)
        self.spatial = SpatialAttention(kernel_size, norm_layer=spatial_norm, gate_layer=gate_layer)
        self.channels = channels

    def attention(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The channel gate (B, C, 1, 1) and the spatial gate (B, 1, H, W) of the channel-refined map."""
        channel_gate = self.channel.attention(x)
        return channel_gate, self.spatial.attention(x * channel_gate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_nchw(x, self.channels, type(self).__name__)
        return self.spatial(self.channel(x))

