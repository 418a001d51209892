"""Building blocks, one concept a file; nothing here knows about models."""
from vision_attn.layers.activations import ACT_LAYERS, QuickGELU
from vision_attn.layers.attention import Attention, attend, record_attention
from vision_attn.layers.attention_pool import AttentionPoolLatent
from vision_attn.layers.convnext_block import ConvMlp, ConvNeXtBlock, ConvNeXtStage, LayerNorm2d
from vision_attn.layers.cosine_window_attention import CosineWindowAttention, TorchvisionCosineWindowAttention
from vision_attn.layers.block import BLOCKS, Block, GammaBlock, LayerNorm6, PostNormBlock
from vision_attn.layers.deformable_attention import (
    MultiScaleDeformableAttention,
    multi_scale_deformable_attn,
    sample_standard,
    sampling_locations,
)
from vision_attn.layers.drop_path import DropPath, drop_path
from vision_attn.layers.layer_scale import LayerScale
from vision_attn.layers.mlp import Mlp, SwiGLU, SwiGLUNorm, SwiGLUSplit, FFN_LAYERS
from vision_attn.layers.eva_attention import EvaAttention
from vision_attn.layers.eva_rope import RopeEva, apply_rope_interleaved
from vision_attn.layers.norm_head import NormPoolHead
from vision_attn.layers.patch_embed import PatchEmbed, to_2tuple
from vision_attn.layers.rope_dinov3 import RopeDinov3
from vision_attn.layers.patch_merging import PatchMerging, PatchMergingV2
from vision_attn.layers.pos_embed import (
    POS_EMBED_KINDS,
    Rope2D,
    apply_rope,
    resample_abs_pos_embed,
    sincos_2d,
)
from vision_attn.layers.swin_block import (
    WINDOW_RULES,
    SwinBlock,
    SwinV2Block,
    TimmWindows,
    TorchvisionWindows,
    WindowRule,
)
from vision_attn.layers.window_attention import (
    ShiftedWindows,
    WindowAttention,
    gather_tokens,
    region_mask,
    relative_position_index,
    resample_relative_position_bias,
    window_index,
    window_partition,
    window_reverse,
)

__all__ = [
    "Attention", "attend", "record_attention", "AttentionPoolLatent", "QuickGELU", "ACT_LAYERS", "FFN_LAYERS", "BLOCKS", "Block", "GammaBlock", "PostNormBlock", "LayerNorm6",
    "DropPath", "drop_path", "LayerScale", "Mlp", "SwiGLU", "SwiGLUNorm", "SwiGLUSplit", "EvaAttention", "RopeEva", "RopeDinov3",
    "apply_rope_interleaved", "PatchEmbed", "to_2tuple", "POS_EMBED_KINDS",
    "Rope2D", "apply_rope", "resample_abs_pos_embed", "sincos_2d",
    "PatchMerging", "WindowAttention", "ShiftedWindows", "window_partition", "window_reverse", "window_index",
    "gather_tokens", "region_mask",
    "relative_position_index", "resample_relative_position_bias", "SwinBlock", "WindowRule", "TimmWindows",
    "TorchvisionWindows", "WINDOW_RULES", "SwinV2Block", "PatchMergingV2", "CosineWindowAttention",
    "TorchvisionCosineWindowAttention", "MultiScaleDeformableAttention", "multi_scale_deformable_attn", "sample_standard",
    "sampling_locations", "ConvMlp", "ConvNeXtBlock", "ConvNeXtStage", "LayerNorm2d", "NormPoolHead",
]
