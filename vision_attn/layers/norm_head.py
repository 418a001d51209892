"""A classifier head that pools, normalises, then classifies (ConvNeXt's; timm's ``NormMlpClassifierHead``
without its optional hidden layer; over tokens or channels-last maps, Hiera's and SAM 2's, timm's
``ClNormMlpClassifierHead``): keys ``norm`` and ``fc``."""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers.convnext_block import LayerNorm2d

__all__ = ["NormPoolHead"]

_FMTS = ("NCHW", "NLC", "NHWC")


class NormPoolHead(nn.Module):
    """Map (B, C, H, W) -> logits (B, num_classes): the spatial mean (``global_pool="avg"``), a
    LayerNorm over the channels ``norm``, dropout, a linear ``fc`` (none when ``num_classes`` is 0: the
    pooled, normalised features). ``global_pool=""``: no pooling, the normalised map itself.
    ``input_fmt``: ``"NLC"`` tokens (B, N, C) or ``"NHWC"`` maps, pooled by their mean (unpooled: the
    input's layout out)."""

    def __init__(self, dim: int, num_classes: int, global_pool: str = "avg", norm_eps: float = 1e-6,
                 drop_rate: float = 0.0, input_fmt: str = "NCHW") -> None:
        super().__init__()
        if input_fmt not in _FMTS:
            raise ConfigError(f"input_fmt={input_fmt!r}: choose one of {', '.join(_FMTS)}")
        self.dim, self.input_fmt = dim, input_fmt
        self.norm = LayerNorm2d(dim, eps=norm_eps)
        self.drop = nn.Dropout(drop_rate)
        self.global_pool = "avg"
        self.fc: nn.Module = nn.Identity()
        self.reset(num_classes, global_pool)

    def reset(self, num_classes: int, global_pool: str | None = None) -> None:
        """A fresh ``fc`` for ``num_classes`` (0: none); ``global_pool`` ``"avg"`` or ``""`` (None: kept)."""
        if global_pool is not None:
            if global_pool not in ("avg", ""):
                raise ConfigError(f"global_pool={global_pool!r}: choose 'avg' or '' (no pooling)")
            self.global_pool = global_pool
        if num_classes > 0 and not self.global_pool:
            raise ConfigError("a classifier needs pooled features; with global_pool='' give num_classes=0")
        weight = getattr(self.norm, "weight", None)  # None once the norm is pruned (an identity)
        device = weight.device if weight is not None else None
        self.fc = nn.Linear(self.dim, num_classes, device=device) if num_classes > 0 else nn.Identity()
        if isinstance(self.fc, nn.Linear) and not self.fc.weight.is_meta:
            nn.init.trunc_normal_(self.fc.weight, std=0.02)
            nn.init.zeros_(self.fc.bias)

    def forward(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if self.input_fmt == "NLC":  # (B, N, C) -> (B, C, N, 1)
            x = x.transpose(1, 2)[..., None]
        elif self.input_fmt == "NHWC":
            x = x.permute(0, 3, 1, 2)
        if self.global_pool:
            x = x.mean(dim=(2, 3), keepdim=True)  # (B, C, 1, 1)
        x = self.norm(x)
        if self.global_pool:
            x = x.flatten(1)  # (B, C)
        elif self.input_fmt == "NLC":
            x = x[..., 0].transpose(1, 2)  # (B, N, C)
        elif self.input_fmt == "NHWC":
            x = x.permute(0, 2, 3, 1)
        x = self.drop(x)
        return x if pre_logits else self.fc(x)
