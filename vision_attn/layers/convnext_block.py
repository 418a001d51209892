"""ConvNeXt's block and stage (Liu et al. 2022, "A ConvNet for the 2020s"; timm's ``ConvNeXtBlock`` and
``ConvNeXtStage`` keys, which DINOv3's distilled ConvNeXts use too).

Block, on maps (B, C, H, W): a depthwise 7x7 convolution ``conv_dw``, a LayerNorm over the channels
``norm``, an MLP ``mlp.fc1`` (C -> 4C), GELU, ``mlp.fc2`` (4C -> C), the layer scale ``gamma`` (a
per-channel vector, ``ls_init_value``), stochastic depth, and the residual. The norm and MLP run
channels-last on ``nn.Linear`` (the official layout), or with ``conv_mlp`` channels-first on 1x1
convolutions (:class:`LayerNorm2d`, :class:`ConvMlp`: timm's small "atto" to "nano" models), the same
arithmetic with 4-D weights. Stage: a ``downsample`` (LayerNorm2d, then a 2x2 convolution of stride 2)
unless it is the first, then its ``blocks``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.layers.drop_path import DropPath
from vision_attn.layers.mlp import Mlp

__all__ = ["LayerNorm2d", "ConvMlp", "ConvNeXtBlock", "ConvNeXtStage"]


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of a map (B, C, H, W) (timm's ``LayerNorm2d``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)  # (B, H, W, C)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class ConvMlp(Mlp):
    """:class:`~vision_attn.layers.mlp.Mlp` on maps (B, C, H, W): ``fc1`` and ``fc2`` are 1x1 convolutions
    (timm's ``Mlp(use_conv=True)``)."""

    def __init__(self, in_features: int, hidden_features: int | None = None, out_features: int | None = None,
                 act_layer: type[nn.Module] = nn.GELU, drop: float = 0.0, bias: bool = True) -> None:
        super().__init__(in_features, hidden_features, out_features, act_layer=act_layer, drop=drop, bias=bias)
        self.fc1 = nn.Conv2d(in_features, self.fc1.out_features, 1, bias=bias)
        self.fc2 = nn.Conv2d(self.fc1.out_channels, out_features or in_features, 1, bias=bias)


class ConvNeXtBlock(nn.Module):
    """Maps (B, C, H, W) -> (B, C, H, W): x + drop_path(gamma * mlp(norm(conv_dw(x)))) (see the module)."""

    def __init__(self, dim: int, kernel_size: int = 7, mlp_ratio: float = 4.0, ls_init_value: float | None = 1e-6,
                 conv_mlp: bool = False, norm_eps: float = 1e-6, act_layer: type[nn.Module] = nn.GELU,
                 drop_path: float = 0.0) -> None:
        super().__init__()
        self.conv_mlp = conv_mlp
        self.conv_dw = nn.Conv2d(dim, dim, kernel_size, padding=kernel_size // 2, groups=dim)
        self.norm = (LayerNorm2d if conv_mlp else nn.LayerNorm)(dim, eps=norm_eps)
        self.mlp = (ConvMlp if conv_mlp else Mlp)(dim, int(mlp_ratio * dim), act_layer=act_layer)
        self.gamma = nn.Parameter(torch.full((dim,), float(ls_init_value))) if ls_init_value is not None else None
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv_dw(x)
        if self.conv_mlp:
            y = self.mlp(self.norm(y))  # (B, C, H, W)
            if self.gamma is not None:
                y = y * self.gamma.reshape(1, -1, 1, 1)
        else:
            y = self.mlp(self.norm(y.permute(0, 2, 3, 1)))  # (B, H, W, C)
            if self.gamma is not None:
                y = y * self.gamma
            y = y.permute(0, 3, 1, 2)
        return x + self.drop_path(y)


class ConvNeXtStage(nn.Module):
    """A ``downsample`` (``in_dim`` -> ``dim`` at half the size; none when ``downsample=False``) and
    ``depth`` blocks of width ``dim``; ``drop_path``: one rate per block."""

    def __init__(self, in_dim: int, dim: int, depth: int, *, downsample: bool = True, kernel_size: int = 7,
                 mlp_ratio: float = 4.0, ls_init_value: float | None = 1e-6, conv_mlp: bool = False,
                 norm_eps: float = 1e-6, act_layer: type[nn.Module] = nn.GELU,
                 drop_path: list[float] | None = None) -> None:
        super().__init__()
        self.downsample = (nn.Sequential(LayerNorm2d(in_dim, eps=norm_eps), nn.Conv2d(in_dim, dim, 2, stride=2))
                           if downsample else nn.Identity())
        rates = drop_path or [0.0] * depth
        self.blocks = nn.Sequential(*(ConvNeXtBlock(dim, kernel_size, mlp_ratio, ls_init_value, conv_mlp, norm_eps,
                                                    act_layer, rates[i]) for i in range(depth)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.downsample(x))
