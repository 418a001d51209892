"""Squeeze-and-Excitation (Hu et al., CVPR 2018): channel attention from the global average."""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.layers.plugins.checks import check_channels, check_nchw, reduced_channels


class SqueezeExcite(nn.Module):
    """``x * sigmoid(fc2(act(fc1(mean_hw(x)))))``: (B, C, H, W) -> (B, C, H, W).

    The gate (:meth:`attention`) is (B, C, 1, 1), in (0, 1). ``fc1``/``fc2`` are 1x1 convolutions
    with bias, C -> r -> C, where r is ``channels / reduction`` rounded to a multiple of ``divisor``
    (at least ``divisor``), or ``rd_channels`` when given. The defaults, the rounding and the keys
    (``fc1.*``, ``fc2.*``) are those of timm's ``SEModule``, so timm SE-ResNet weights load.
    """

    def __init__(
        self,
        channels: int,
        *,
        reduction: float = 16,
        divisor: int = 8,
        rd_channels: int | None = None,
        bias: bool = True,
        act_layer: type[nn.Module] = nn.ReLU,
        gate_layer: type[nn.Module] = nn.Sigmoid,
    ) -> None:
        super().__init__()
        check_channels(channels, type(self).__name__)
        self.channels = channels
        rd = rd_channels or reduced_channels(channels, reduction, divisor)
        self.fc1 = nn.Conv2d(channels, rd, 1, bias=bias)
        self.act = act_layer()
        self.fc2 = nn.Conv2d(rd, channels, 1, bias=bias)
        self.gate = gate_layer()

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """The channel gate, (B, C, 1, 1)."""
        return self.gate(self.fc2(self.act(self.fc1(x.mean((2, 3), keepdim=True)))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_nchw(x, self.channels, type(self).__name__)
        return x * self.attention(x)
