"""Hiera (Ryali et al. 2023) under timm's names, ``hiera_tiny_224`` ... ``hiera_huge_224`` and the
``hiera_small_abswin_256`` / ``hiera_base_abswin_256`` variants (Bolya et al. 2023's absolute-window
position embedding): one configurable class :class:`Hiera` with timm's keys (timm's files load as they
are) and timm's model interface; transformers' ``hiera`` folders load through
:mod:`vision_attn.models.hf.hiera`.

Layout: a 7x7 convolution of stride 4 (``patch_embed.proj``), a position embedding added to the
tokens, the tokens *unrolled* (:func:`~vision_attn.layers.mask_unit_attention.unroll_order`), then
``blocks`` (:class:`~vision_attn.layers.pooling_block.PoolingBlock` around
:class:`~vision_attn.layers.mask_unit_attention.MaskUnitAttention`) in four stages: the first block
of each later stage doubles the width and heads and pools the queries 2x2 (the first ``q_pool``
transitions), the first stages attend within mask units (8x8 tokens at stride 4), the later ones
globally. The head (:class:`~vision_attn.layers.norm_head.NormPoolHead` over tokens): mean, LayerNorm,
``fc``. Four feature levels at strides 4, 8, 16, 32 (``blocks.{stage end}``, timm's ``feature_info``),
each stage's tokens rolled back to a map.

Sizes: the unrolling and the mask units tie the model to its ``img_size`` (a multiple of 32 whose
token grid the mask units tile), as in timm; the plain position embedding is one row per token, so
a file loads at the size it was saved at. The abswin variants' embedding (a global table resampled at
run time, plus one mask unit's table tiled) builds at any such size, as timm's does.
"""
from __future__ import annotations

import math
from functools import partial
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import CheckpointError, ConfigError, DataError
from vision_attn.layers.mask_unit_attention import MaskUnitAttention, unroll_order, unrolled_pool
from vision_attn.layers.norm_head import NormPoolHead
from vision_attn.layers.pooling_block import PoolingBlock
from vision_attn.models.contract import NormPoolClassifier, TimmContract, init_trunc_normal, run_blocks
from vision_attn.models.pretrained_cfg import data_cfg
from vision_attn.models.registry import register_model

__all__ = ["Hiera", "HieraStages"]


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def check_size(x: torch.Tensor, img_size: tuple[int, int]) -> torch.Tensor:
    """``x`` when its images are ``img_size``; else a DataError naming both sizes."""
    if tuple(x.shape[-2:]) != tuple(img_size):
        raise DataError(f"Hiera built for {img_size[0]}x{img_size[1]} images got {x.shape[-2]}x{x.shape[-1]}: its "
                        f"mask units are fixed when it is built; create it with img_size=({x.shape[-2]}, {x.shape[-1]})")
    return x


torch.fx.wrap("check_size")  # torch.fx: one leaf node, not a branch on a traced size


class HieraStages(NormPoolClassifier, TimmContract, nn.Module):
    """What Hiera and SAM 2's HieraDet share: ``blocks`` in stages ending at ``stage_ends``, one feature
    level each; ``head`` a :class:`~vision_attn.layers.norm_head.NormPoolHead` of layout ``head_fmt``
    (mean, LayerNorm, ``fc``); position tables ``pos_embed*``. Subclasses give ``_begin`` (image to the
    first stage's input) and ``_feature_map``."""

    output_fmts = ("NCHW", "NHWC")
    features_only_fmt = "NCHW"
    classifier_keys = ("head.fc.weight", "head.fc.bias")
    head_fmt = "NLC"
    blocks: nn.ModuleList
    stage_ends: list[int]
    head: NormPoolHead

    def init_weights(self) -> None:
        """Truncated normal (std 0.02) for the position tables, convolution and linear layers, zero biases."""
        for name, p in self.named_parameters():
            if name.startswith("pos_embed") and not p.is_meta:
                nn.init.trunc_normal_(p, std=0.02)
        init_trunc_normal(self)

    def _levels(self) -> list[nn.ModuleList]:
        starts = [0] + [e + 1 for e in self.stage_ends[:-1]]
        return [self.blocks[s: e + 1] for s, e in zip(starts, self.stage_ends) if s < len(self.blocks)]

    def _run_level(self, i: int, x: torch.Tensor, context: None) -> torch.Tensor:
        return run_blocks(self, self._levels()[i], x)

    def _end(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def _truncate(self, last: int) -> None:
        end = self.stage_ends[last]
        if end < len(self.blocks) - 1:
            self.num_features = self.feature_info[last]["num_chs"]
            self.head = NormPoolHead(self.num_features, 0, self.head.global_pool, input_fmt=self.head_fmt)
            self.head.norm = nn.Identity()  # the head's norm fits the last stage only (timm's reset_other)
        self.blocks = self.blocks[: end + 1]

    def _prune_norm(self) -> None:
        """No norm follows the last stage (the head's norm goes with the head)."""

    def _prune_head(self) -> None:
        """The classifier and the head's norm go (timm's ``reset_classifier(0, reset_other=True)``):
        the model returns the mean of the last stage's output."""
        self.reset_classifier(0)
        self.head.norm = nn.Identity()


class Hiera(HieraStages):
    """Images (B, C, H, W) of ``img_size`` -> logits (B, num_classes); ``num_classes=0``: the pooled,
    normalised features (B, num_features). ``stages``: blocks per stage; ``mask_unit_attn``: which
    stages attend within mask units; ``abs_win_pos_embed``: the abswin embedding (``global_pos_size``
    table plus a ``mask_unit_size`` table tiled); ``expand_proj=False``: widen by max- and mean-pooling
    side by side instead of a projection; ``init_values``: layer scale (None: none);
    ``pos_embed_grid``: the plain table's token grid when it is not ``img_size``'s (a transformers
    folder built at another size: the table is resampled at run time, as transformers does)."""

    def __init__(self, *, img_size: int | Sequence[int] = 224, in_chans: int = 3, embed_dim: int = 96,
                 num_heads: int = 1, num_classes: int = 1000, global_pool: str = "avg",
                 stages: Sequence[int] = (2, 3, 16, 3), q_pool: int = 3, q_stride: Sequence[int] = (2, 2),
                 mask_unit_size: Sequence[int] = (8, 8), mask_unit_attn: Sequence[bool] = (True, True, False, False),
                 expand_proj: bool = True, dim_mul: float = 2.0, head_mul: float = 2.0,
                 patch_kernel: Sequence[int] = (7, 7), patch_stride: Sequence[int] = (4, 4),
                 patch_padding: Sequence[int] = (3, 3), mlp_ratio: float = 4.0, drop_rate: float = 0.0,
                 drop_path_rate: float = 0.0, init_values: float | None = None, norm_eps: float = 1e-6,
                 abs_win_pos_embed: bool = False, global_pos_size: Sequence[int] = (14, 14),
                 pos_embed_grid: Sequence[int] | None = None) -> None:
        super().__init__()
        img_size, q_stride, mask_unit_size = _pair(img_size), _pair(q_stride), _pair(mask_unit_size)
        patch_stride = _pair(patch_stride)
        if not 0 <= q_pool < len(stages) or len(mask_unit_attn) != len(stages):
            raise ConfigError(f"Hiera: q_pool={q_pool} must be below the {len(stages)} stages, and mask_unit_attn "
                              f"needs one flag per stage (got {len(mask_unit_attn)})")
        grid = tuple(i // s for i, s in zip(img_size, patch_stride))
        shrink = tuple(q ** (len(stages) - 1) for q in q_stride)
        if any(g % k or g % m or g % s for g, k, m, s in zip(grid, shrink, mask_unit_size, q_stride)) \
                or any(i % s for i, s in zip(img_size, patch_stride)):
            step = max(a * b for a, b in zip(patch_stride, (math.lcm(k, m) for k, m in zip(shrink, mask_unit_size))))
            raise ConfigError(f"Hiera: img_size={img_size} does not unroll into whole mask units of {mask_unit_size} "
                              f"tokens: give a multiple of {step}")
        self.img_size, self.grid = img_size, grid
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.mask_unit_size = mask_unit_size
        self.units = tuple(g // m for g, m in zip(grid, mask_unit_size))
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(in_chans, embed_dim, _pair(patch_kernel), patch_stride, _pair(patch_padding))
        if abs_win_pos_embed:
            self.pos_embed = nn.Parameter(torch.zeros(1, embed_dim, *_pair(global_pos_size)))
            self.pos_embed_win = nn.Parameter(torch.zeros(1, embed_dim, *mask_unit_size))
        else:
            self.pos_grid = tuple(pos_embed_grid) if pos_embed_grid is not None else grid
            self.pos_embed = nn.Parameter(torch.zeros(1, math.prod(self.pos_grid), embed_dim))
            self.pos_embed_win = None
        schedule = [q_stride] * (len(stages) - 1)
        self.register_buffer("unroll", unroll_order(grid, schedule), persistent=False)
        # each stage's inverse order: the grid after its poolings, the splits not yet pooled
        size, rest = list(grid), list(schedule)
        self.stage_ends = [sum(stages[: i + 1]) - 1 for i in range(len(stages))]
        self.stage_sizes: list[tuple[int, ...]] = []
        for i in range(len(stages)):
            self.stage_sizes.append(tuple(size))
            self.register_buffer(f"reroll{i}", torch.argsort(unroll_order(size, rest)), persistent=False)
            if i < q_pool and rest:
                size, rest = [n // s for n, s in zip(size, rest[0])], rest[1:]
        flat_unit, flat_q = math.prod(mask_unit_size), math.prod(q_stride)
        rates = torch.linspace(0, drop_path_rate, sum(stages), device="cpu").tolist()
        blocks, stage, dim, heads = [], 0, embed_dim, num_heads
        self.feature_info = []
        for i in range(sum(stages)):
            dim_out, pool = dim, 1
            mask_unit = mask_unit_attn[stage]  # a stage's first block attends as the stage before
            if i - 1 in self.stage_ends:
                dim_out, heads, stage = int(dim * dim_mul), int(heads * head_mul), stage + 1
                if stage <= q_pool:
                    flat_unit //= flat_q
                    pool = flat_q
            widens = partial(unrolled_pool, stride=pool, mean=not expand_proj) if dim != dim_out else None
            blocks.append(PoolingBlock(dim, dim_out, heads, attn_class=MaskUnitAttention,
                                       attn_args=dict(q_stride=pool, window=flat_unit, mask_unit=mask_unit), pool=widens,
                                       expand_proj=expand_proj, mlp_ratio=mlp_ratio, init_values=init_values,
                                       drop_path=rates[i], norm_eps=norm_eps))
            dim = dim_out
            if i in self.stage_ends:
                self.feature_info.append(dict(num_chs=dim, reduction=patch_stride[0] * 2 ** stage, module=f"blocks.{i}"))
        self.blocks = nn.ModuleList(blocks)
        self.num_features = dim
        self.head = NormPoolHead(dim, num_classes, global_pool, norm_eps=norm_eps, drop_rate=drop_rate, input_fmt="NLC")
        self.grad_checkpointing = False
        self.init_weights()

    def no_weight_decay(self) -> set[str]:
        return {"pos_embed", "pos_embed_win"} if self.pos_embed_win is not None else {"pos_embed"}

    def convert_checkpoint(self, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """timm's keys as they are; the official layout (facebookresearch/hiera: ``head.projection``,
        ``norm`` or ``encoder_norm``, ``pos_embed_abs``) renamed as timm renames it. A video Hiera's
        separate spatial and temporal tables are refused, naming the option."""
        if "pos_embed_spatial" in state_dict or "pos_embed_temporal" in state_dict:
            raise CheckpointError("pos_embed_spatial / pos_embed_temporal: a video Hiera's separate position "
                                  "embeddings (sep_pos_embed=True), an option vision_attn's Hiera does not build; "
                                  "load it with timm")
        out = {}
        for key, value in state_dict.items():
            key = key.replace("head.projection.", "head.fc.")
            if key.startswith(("encoder_norm.", "norm.")):
                key = "head.norm." + key.split(".", 1)[1]
            out["pos_embed" if key == "pos_embed_abs" else key] = value
        return out

    def _position(self) -> torch.Tensor:
        """The position embedding, one row per token in raster order: (1, N, D)."""
        if self.pos_embed_win is None:
            if self.pos_grid == self.grid:
                return self.pos_embed
            # a table of another grid (a transformers folder run at another size): resampled bicubically
            # without antialiasing, as transformers' interpolate_pos_encoding
            table = self.pos_embed.reshape(1, *self.pos_grid, -1).permute(0, 3, 1, 2)
            table = F.interpolate(table, size=self.grid, mode="bicubic", align_corners=False)
            return table.permute(0, 2, 3, 1).reshape(1, -1, table.shape[1])
        win = self.pos_embed_win.tile(1, 1, *self.units)
        glob = F.interpolate(self.pos_embed, size=win.shape[-2:], mode="bicubic", antialias=True)
        return (glob + win).flatten(2).transpose(1, 2)

    def rolled(self, x: torch.Tensor, stage: int) -> torch.Tensor:
        """Stage ``stage``'s tokens (B, N, C) as a map (B, h, w, C) in raster order."""
        return x[:, getattr(self, f"reroll{stage}")].reshape(x.shape[0], *self.stage_sizes[stage], x.shape[-1])

    def _begin(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        x = self.patch_embed.proj(check_size(x, self.img_size)).flatten(2).transpose(1, 2) + self._position()
        return x[:, self.unroll], None

    def _feature_map(self, i: int, x: torch.Tensor, context: None, norm: bool, output_fmt: str) -> torch.Tensor:
        """Stage ``i``'s tokens rolled back to a map (no norm follows a stage: ``norm`` changes nothing)."""
        y = self.rolled(x, i)
        return y.permute(0, 3, 1, 2) if output_fmt == "NCHW" else y


# ------------------------------------------------------------------------------------------------
# Variants, timm's configurations and input configurations
_CFG = data_cfg(224, crop_pct=0.9)
_ABSWIN_CFG = data_cfg(256, crop_pct=0.95)


def hiera(embed_dim: int, num_heads: int, stages: Sequence[int], kwargs: dict, **extra) -> Hiera:
    return Hiera(**{"embed_dim": embed_dim, "num_heads": num_heads, "stages": stages, **extra, **kwargs})


@register_model(cfg=_CFG)
def hiera_tiny_224(**kwargs) -> Hiera:
    """Hiera-T (27.9 M parameters)."""
    return hiera(96, 1, (1, 2, 7, 2), kwargs)


@register_model(cfg=_CFG)
def hiera_small_224(**kwargs) -> Hiera:
    """Hiera-S (35.0 M)."""
    return hiera(96, 1, (1, 2, 11, 2), kwargs)


@register_model(cfg=_CFG)
def hiera_base_224(**kwargs) -> Hiera:
    """Hiera-B (51.5 M)."""
    return hiera(96, 1, (2, 3, 16, 3), kwargs)


@register_model(cfg=_CFG)
def hiera_base_plus_224(**kwargs) -> Hiera:
    """Hiera-B+ (69.9 M)."""
    return hiera(112, 2, (2, 3, 16, 3), kwargs)


@register_model(cfg=_CFG)
def hiera_large_224(**kwargs) -> Hiera:
    """Hiera-L (213.7 M)."""
    return hiera(144, 2, (2, 6, 36, 4), kwargs)


@register_model(cfg=_CFG)
def hiera_huge_224(**kwargs) -> Hiera:
    """Hiera-H (672.8 M)."""
    return hiera(256, 4, (2, 6, 36, 4), kwargs)


@register_model(cfg=_ABSWIN_CFG)
def hiera_small_abswin_256(**kwargs) -> Hiera:
    """Hiera-S (34.4 M) at 256 px with the absolute-window position embedding, layer scale, and widening by
    pooling (no projection), timm's ``sbb2`` recipe."""
    return hiera(96, 1, (1, 2, 11, 2), kwargs, img_size=256, abs_win_pos_embed=True, global_pos_size=(16, 16),
                 init_values=1e-5, expand_proj=False)


@register_model(cfg=_ABSWIN_CFG)
def hiera_base_abswin_256(**kwargs) -> Hiera:
    """Hiera-B (51.3 M) at 256 px with the absolute-window position embedding and layer scale."""
    return hiera(96, 1, (2, 3, 16, 3), kwargs, img_size=256, abs_win_pos_embed=True, init_values=1e-5)
