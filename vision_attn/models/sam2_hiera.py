"""SAM 2's Hiera image encoders (HieraDet, Ravi et al. 2024) under timm's names, ``sam2_hiera_tiny``,
``sam2_hiera_small``, ``sam2_hiera_base_plus``, ``sam2_hiera_large`` and ``hieradet_small``: one
configurable class :class:`HieraDet` with timm's keys and model interface.

Unlike :mod:`Hiera <vision_attn.models.hiera>`, the tokens stay a channels-last map (B, H, W, C): no
unrolling, no mask units. A 7x7 convolution of stride 4 (``patch_embed.proj``), a position embedding
(a ``global_pos_size`` table resampled bicubically to the map at run time, plus a window's table
``pos_embed_window`` tiled), then ``blocks``
(:class:`~vision_attn.layers.pooling_block.PoolingBlock` around
:class:`~vision_attn.layers.pooled_attention.PooledAttention`) in four stages: each stage attends in
windows of its ``window_spec`` size (a stage's first block in the previous stage's), the blocks of
``global_att_blocks`` globally; the first block of each of the first ``q_pool`` later stages doubles
width and heads and max-pools the queries 2x2. Head: mean, LayerNorm, ``fc`` (the SAM 2 names have no
classifier, as timm's: ``num_classes`` 0). Four feature levels at strides 4, 8, 16, 32
(``blocks.{stage end}``). Any image size whose stride-4 map the first window tiles runs (a multiple of
32 for the published window of 8), as in timm.
"""
from __future__ import annotations

from functools import partial
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import ConfigError, DataError
from vision_attn.layers.norm_head import NormPoolHead
from vision_attn.layers.pooled_attention import PooledAttention, max_pool
from vision_attn.layers.pooling_block import PoolingBlock
from vision_attn.models.hiera import HieraStages
from vision_attn.models.pretrained_cfg import data_cfg
from vision_attn.models.registry import register_model

__all__ = ["HieraDet"]


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def window_position(table: torch.Tensor, window: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The position embedding of the map ``x`` (B, C, h, w): ``table`` resampled bicubically to (h, w) plus
    ``window`` tiled over it; a ConfigError when the window does not tile the map."""
    h, w = x.shape[-2:]
    wh, ww = window.shape[-2:]
    if h % wh or w % ww:
        raise DataError(f"HieraDet: the image gives a {h}x{w} map at stride 4 that its {wh}x{ww} position window "
                          f"does not tile: give images of a multiple of {4 * wh}x{4 * ww} pixels")
    return F.interpolate(table, size=(h, w), mode="bicubic") + window.tile(1, 1, h // wh, w // ww)


torch.fx.wrap("window_position")  # torch.fx: one leaf node, not a branch on a traced size


class HieraDet(HieraStages):
    """Images (B, C, H, W) -> logits (B, num_classes); ``num_classes=0``: the pooled, normalised
    features. ``window_spec``: each stage's window (0: global); ``global_att_blocks``: blocks that
    attend globally; ``init_values``: layer scale (None: none); ``img_size`` is accepted (the input
    configuration's size) and changes nothing."""

    head_fmt = "NHWC"
    output_fmt = "NHWC"  # timm's attribute: forward_features' layout

    def __init__(self, *, in_chans: int = 3, num_classes: int = 1000, global_pool: str = "avg", embed_dim: int = 96,
                 num_heads: int = 1, patch_kernel: Sequence[int] = (7, 7), patch_stride: Sequence[int] = (4, 4),
                 patch_padding: Sequence[int] = (3, 3), q_pool: int = 3, q_stride: Sequence[int] = (2, 2),
                 stages: Sequence[int] = (2, 3, 16, 3), dim_mul: float = 2.0, head_mul: float = 2.0,
                 global_pos_size: Sequence[int] = (7, 7), window_spec: Sequence[int] = (8, 4, 14, 7),
                 global_att_blocks: Sequence[int] = (12, 16, 20), init_values: float | None = None,
                 mlp_ratio: float = 4.0, drop_rate: float = 0.0, drop_path_rate: float = 0.0, norm_eps: float = 1e-6,
                 img_size: int | Sequence[int] | None = None) -> None:
        super().__init__()
        if len(window_spec) != len(stages) or not 0 <= q_pool < len(stages):
            raise ConfigError(f"HieraDet: window_spec needs one window per stage ({len(stages)}, got {len(window_spec)}) "
                              f"and q_pool={q_pool} must be below the stage count")
        self.num_classes, self.in_chans = num_classes, in_chans
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(in_chans, embed_dim, _pair(patch_kernel), _pair(patch_stride),
                                          _pair(patch_padding))
        self.pos_embed = nn.Parameter(torch.zeros(1, embed_dim, *_pair(global_pos_size)))
        self.pos_embed_window = nn.Parameter(torch.zeros(1, embed_dim, window_spec[0], window_spec[0]))
        self.stage_ends = [sum(stages[: i + 1]) - 1 for i in range(len(stages))]
        pool_blocks = [e + 1 for e in self.stage_ends[:-1]][:q_pool]
        rates = torch.linspace(0, drop_path_rate, sum(stages), device="cpu").tolist()
        blocks, stage, dim, heads = [], 0, embed_dim, num_heads
        self.feature_info = []
        for i in range(sum(stages)):
            window = 0 if i in global_att_blocks else window_spec[stage]  # the stage before's, at a first block
            dim_out = dim
            if i - 1 in self.stage_ends:
                dim_out, heads, stage = int(dim * dim_mul), int(heads * head_mul), stage + 1
            stride = _pair(q_stride) if i in pool_blocks else None
            widens = partial(max_pool, stride=stride) if dim != dim_out and stride is not None else None
            blocks.append(PoolingBlock(dim, dim_out, heads, attn_class=PooledAttention,
                                       attn_args=dict(q_stride=stride, window=window), pool=widens, mlp_ratio=mlp_ratio,
                                       init_values=init_values, drop_path=rates[i], norm_eps=norm_eps))
            dim = dim_out
            if i in self.stage_ends:
                self.feature_info.append(dict(num_chs=dim, reduction=2 ** (stage + 2), module=f"blocks.{i}"))
        self.blocks = nn.ModuleList(blocks)
        self.num_features = dim
        self.head = NormPoolHead(dim, num_classes, global_pool, norm_eps=norm_eps, drop_rate=drop_rate, input_fmt="NHWC")
        self.grad_checkpointing = False
        self.init_weights()

    def no_weight_decay(self) -> set[str]:
        return {"pos_embed", "pos_embed_window"}

    def convert_checkpoint(self, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """timm's keys as they are; SAM 2's trunk layout (``mlp.layers.0/1``) renamed as timm renames it."""
        return {k.replace("mlp.layers.0.", "mlp.fc1.").replace("mlp.layers.1.", "mlp.fc2."): v
                for k, v in state_dict.items()}

    def _begin(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        x = self.patch_embed.proj(x)  # (B, C, h, w)
        return (x + window_position(self.pos_embed, self.pos_embed_window, x)).permute(0, 2, 3, 1), None

    def _feature_map(self, i: int, x: torch.Tensor, context: None, norm: bool, output_fmt: str) -> torch.Tensor:
        """Stage ``i``'s map (no norm follows a stage: ``norm`` changes nothing)."""
        return x.permute(0, 3, 1, 2) if output_fmt == "NCHW" else x


# ------------------------------------------------------------------------------------------------
# Variants, timm's configurations and input configurations (the SAM 2 weights: no classifier)
def _sam2_cfg(size: int) -> dict:
    return data_cfg(size, crop_pct=1.0, fixed_input_size=False)


def hieradet(kwargs: dict, num_classes: int = 0, **config) -> HieraDet:
    return HieraDet(**{"num_classes": num_classes, **config, **kwargs})


@register_model(cfg=_sam2_cfg(896))
def sam2_hiera_tiny(**kwargs) -> HieraDet:
    """SAM 2's Hiera-T image encoder (26.9 M parameters)."""
    return hieradet(kwargs, stages=(1, 2, 7, 2), global_att_blocks=(5, 7, 9))


@register_model(cfg=_sam2_cfg(896))
def sam2_hiera_small(**kwargs) -> HieraDet:
    """SAM 2's Hiera-S image encoder (33.9 M)."""
    return hieradet(kwargs, stages=(1, 2, 11, 2), global_att_blocks=(7, 10, 13))


@register_model(cfg=_sam2_cfg(896))
def sam2_hiera_base_plus(**kwargs) -> HieraDet:
    """SAM 2's Hiera-B+ image encoder (68.7 M)."""
    return hieradet(kwargs, embed_dim=112, num_heads=2, global_pos_size=(14, 14))


@register_model(cfg=_sam2_cfg(1024))
def sam2_hiera_large(**kwargs) -> HieraDet:
    """SAM 2's Hiera-L image encoder (212.2 M; 1024 px)."""
    return hieradet(kwargs, embed_dim=144, num_heads=2, stages=(2, 6, 36, 4), global_att_blocks=(23, 33, 43),
                    window_spec=(8, 4, 16, 8))


@register_model(cfg=_sam2_cfg(256))
def hieradet_small(**kwargs) -> HieraDet:
    """timm's HieraDet-S classifier (34.7 M; 256 px, layer scale)."""
    return hieradet(kwargs, num_classes=1000, stages=(1, 2, 11, 2), global_att_blocks=(7, 10, 13),
                    window_spec=(8, 4, 16, 8), init_values=1e-5)
