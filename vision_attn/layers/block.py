"""Transformer blocks: pre-norm (ViT, the default) and post-norm (the original Transformer).

Attention and feed-forward classes are injected (``attn_class=``, ``ffn_layer=``), so a block with
another attention is a constructor argument, not a flag inside the block.
"""
from __future__ import annotations

from functools import partial

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers.attention import Attention
from vision_attn.layers.drop_path import DropPath
from vision_attn.layers.layer_scale import LayerScale
from vision_attn.layers.mlp import Mlp

LayerNorm6 = partial(nn.LayerNorm, eps=1e-6)


class Block(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x)), on (B, N, D) tokens.

    ``init_values`` adds LayerScale on both branches; ``drop_path`` is the stochastic-depth rate.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        qk_norm: bool = False,
        proj_drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        init_values: float | None = None,
        act_layer: type[nn.Module] = nn.GELU,
        norm_layer: type[nn.Module] = LayerNorm6,
        attn_class: type[nn.Module] = Attention,
        ffn_layer: type[nn.Module] = Mlp,
    ) -> None:
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = attn_class(dim, num_heads=num_heads, qkv_bias=qkv_bias, qk_norm=qk_norm,
                               attn_drop=attn_drop, proj_drop=proj_drop, norm_layer=norm_layer)
        self.ls1 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = ffn_layer(dim, int(dim * mlp_ratio), act_layer=act_layer, drop=proj_drop)
        self.ls2 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None,
                attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``attn_mask``: additive, for the attention (padded NaFlex sequences); given only to an
        attention that takes one (:class:`~vision_attn.layers.attention.Attention`)."""
        h = self.norm1(x)
        h = self.attn(h, rope=rope) if attn_mask is None else self.attn(h, rope=rope, attn_mask=attn_mask)
        x = x + self.drop_path1(self.ls1(h))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class PostNormBlock(Block):
    """Post-norm block (Vaswani et al. 2017, "Post-LN"): norm(x + attn(x)), then norm(x + mlp(x)).

    Same parameters and keys as :class:`Block`; trains less stably at depth without warm-up.
    """

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        x = self.norm1(x + self.drop_path1(self.ls1(self.attn(x, rope=rope))))
        return self.norm2(x + self.drop_path2(self.ls2(self.mlp(x))))


class GammaBlock(Block):
    """Pre-norm block whose LayerScale vectors are the block's own parameters ``gamma_1`` and
    ``gamma_2`` (BEiT's, EVA's and timm's DINOv3 keys) rather than ``ls1.gamma`` / ``ls2.gamma``: the
    same computation as :class:`Block` with ``init_values``, which it needs."""

    def __init__(self, dim: int, num_heads: int, *args, init_values: float | None = None, **kwargs) -> None:
        if not init_values:
            raise ConfigError("block='pre_gamma' is a block with LayerScale: give init_values (e.g. 1e-5)")
        super().__init__(dim, num_heads, *args, init_values=None, **kwargs)
        self.gamma_1 = nn.Parameter(torch.full((dim,), float(init_values)))
        self.gamma_2 = nn.Parameter(torch.full((dim,), float(init_values)))

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        x = x + self.drop_path1(self.gamma_1 * self.attn(self.norm1(x), rope=rope))
        return x + self.drop_path2(self.gamma_2 * self.mlp(self.norm2(x)))


BLOCKS: dict[str, type[nn.Module]] = {"pre": Block, "post": PostNormBlock, "pre_gamma": GammaBlock}
