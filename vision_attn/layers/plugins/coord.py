"""Coordinate attention (Hou et al., CVPR 2021): channel attention factorised along height and width."""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.layers.plugins.checks import check_channels, check_nchw


class CoordAttention(nn.Module):
    """``x * a_h * a_w`` from direction-aware pooling. (B, C, H, W) -> (B, C, H, W).

    The map is averaged along W, (B, C, H, 1), and along H, (B, C, 1, W); both strips go through one
    shared 1x1 convolution C -> r, norm and activation (``conv1``, ``bn1``, ``act``), are split again
    and mapped back to C channels by ``conv_h`` and ``conv_w``, each followed by a sigmoid:
    a_h is (B, C, H, 1) and a_w (B, C, 1, W), both in (0, 1) (:meth:`attention`).
    The defaults are the authors': r = max(``min_channels``, C // ``reduction``) = max(8, C // 32),
    convolutions with bias, batch norm, hard swish; the keys are theirs (and timm's ``CoordAttn``).
    """

    def __init__(
        self,
        channels: int,
        *,
        reduction: int = 32,
        min_channels: int = 8,
        rd_channels: int | None = None,
        bias: bool = True,
        norm_layer: type[nn.Module] | None = nn.BatchNorm2d,
        act_layer: type[nn.Module] = nn.Hardswish,
        gate_layer: type[nn.Module] = nn.Sigmoid,
    ) -> None:
        super().__init__()
        check_channels(channels, type(self).__name__)
        self.channels = channels
        rd = rd_channels or max(min_channels, channels // reduction)
        self.conv1 = nn.Conv2d(channels, rd, 1, bias=bias)
        self.bn1 = norm_layer(rd) if norm_layer is not None else nn.Identity()
        self.act = act_layer()
        self.conv_h = nn.Conv2d(rd, channels, 1, bias=bias)
        self.conv_w = nn.Conv2d(rd, channels, 1, bias=bias)
        self.gate = gate_layer()

    def attention(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The height gate a_h, (B, C, H, 1), and the width gate a_w, (B, C, 1, W)."""
        h, w = x.shape[2], x.shape[3]
        strips = torch.cat([x.mean(3, keepdim=True), x.mean(2, keepdim=True).transpose(2, 3)], dim=2)  # (B, C, H+W, 1)
        y = self.act(self.bn1(self.conv1(strips)))
        y_h, y_w = torch.split(y, [h, w], dim=2)
        return self.gate(self.conv_h(y_h)), self.gate(self.conv_w(y_w.transpose(2, 3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_nchw(x, self.channels, type(self).__name__)
        a_h, a_w = self.attention(x)
        return x * a_w * a_h
