"""ECA (Wang et al., CVPR 2020): efficient channel attention, a 1D convolution across channels."""
from __future__ import annotations

import math

import torch
from torch import nn

from vision_attn.layers.plugins.checks import check_channels, check_kernel_size, check_nchw


def eca_kernel_size(channels: int, gamma: float = 2, beta: float = 1) -> int:
    """The paper's adaptive kernel size: ``|log2(C) + beta| / gamma`` truncated, made odd upwards, and
    at least 3 (as timm; the bare formula gives 1 below 8 channels): 64 -> 3, 256 -> 5, 2048 -> 7."""
    t = int(abs(math.log2(channels) + beta) / gamma)
    return max(t if t % 2 else t + 1, 3)


class ECA(nn.Module):
    """``x * sigmoid(conv1d(mean_hw(x)))``: a k-tap convolution without bias slides over the channel
    descriptor, so each channel's gate sees its k neighbours. (B, C, H, W) -> (B, C, H, W).

    The gate (:meth:`attention`) is (B, C, 1, 1), in (0, 1). ``kernel_size`` (odd) overrides the
    adaptive size :func:`eca_kernel_size`. Key ``conv.weight``, as timm's ``EcaModule``.
    """

    def __init__(
        self,
        channels: int,
        *,
        kernel_size: int | None = None,
        gamma: float = 2,
        beta: float = 1,
        gate_layer: type[nn.Module] = nn.Sigmoid,
    ) -> None:
        super().__init__()
        check_channels(channels, type(self).__name__)
        self.channels = channels
        k = eca_kernel_size(channels, gamma, beta) if kernel_size is None else kernel_size
        check_kernel_size(k, type(self).__name__)
        self.conv = nn.Conv1d(1, 1, k, padding=k // 2, bias=False)
        self.gate = gate_layer()

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """The channel gate, (B, C, 1, 1)."""
        b, c = x.shape[:2]
        y = self.conv(x.mean((2, 3)).view(b, 1, c))  # (B, 1, C)
        return self.gate(y).view(b, c, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_nchw(x, self.channels, type(self).__name__)
        return x * self.attention(x)
