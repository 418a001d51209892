"""A pre-norm Transformer block around an attention that may pool and widen its input: Hiera's (over
unrolled tokens, :class:`~vision_attn.layers.mask_unit_attention.MaskUnitAttention`) and SAM 2's (over a
channels-last map, :class:`~vision_attn.layers.pooled_attention.PooledAttention`). The attention class
is injected (``attn_class=``), and so is the pooling of the shortcut (``pool=``): what differs between
the families is a constructor argument. Keys are timm's: ``norm1``, ``proj`` (the widening shortcut),
``attn.*``, ``norm2``, ``mlp.fc1/fc2``, ``ls1/ls2.gamma``.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from vision_attn.layers.drop_path import DropPath
from vision_attn.layers.layer_scale import LayerScale
from vision_attn.layers.mlp import Mlp

__all__ = ["PoolingBlock"]


class PoolingBlock(nn.Module):
    """Pre-norm block: ``s + attn(norm1(x))``, then ``+ mlp(norm2(.))``, each branch with LayerScale
    (``init_values``) and stochastic depth (``drop_path``).

    ``attn = attn_class(dim, dim_out, heads, **attn_args)`` takes ``dim`` features and returns ``dim_out``,
    pooled as it pools (its queries). The shortcut ``s`` is ``x``; where the block widens (``dim !=
    dim_out``) it is ``proj(norm1(x))`` (without ``expand_proj``: ``x`` itself, which ``pool`` must widen);
    ``pool(s)`` pools it as the attention pools its queries (None: no pooling).
    """

    def __init__(self, dim: int, dim_out: int, heads: int, *, attn_class: type[nn.Module],
                 attn_args: dict[str, Any] | None = None, pool: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 expand_proj: bool = True, mlp_ratio: float = 4.0, init_values: float | None = None,
                 drop_path: float = 0.0, norm_eps: float = 1e-5) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.proj = nn.Linear(dim, dim_out) if dim != dim_out and expand_proj else None
        self.attn = attn_class(dim, dim_out, heads, **(attn_args or {}))
        self.pool = pool
        self.ls1 = LayerScale(dim_out, init_values) if init_values is not None else nn.Identity()
        self.drop_path1 = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim_out, eps=norm_eps)
        self.mlp = Mlp(dim_out, int(dim_out * mlp_ratio))
        self.ls2 = LayerScale(dim_out, init_values) if init_values is not None else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_norm = self.norm1(x)
        shortcut = x if self.proj is None else self.proj(x_norm)
        if self.pool is not None:
            shortcut = self.pool(shortcut)
        x = shortcut + self.drop_path1(self.ls1(self.attn(x_norm)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
