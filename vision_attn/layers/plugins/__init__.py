"""Attention blocks that drop into a CNN: each takes the channel count first, maps a (B, C, H, W)
tensor to one of the same shape, and exposes ``attention(x)``, the gate(s) it multiplies by, in (0, 1)."""
from vision_attn.layers.plugins.cbam import CBAM, ChannelAttention, SpatialAttention
from vision_attn.layers.plugins.cbam_ultralytics import (
    UltralyticsCBAM,
    UltralyticsChannelAttention,
    UltralyticsSpatialAttention,
)
from vision_attn.layers.plugins.checks import check_nchw, reduced_channels
from vision_attn.layers.plugins.coord import CoordAttention
from vision_attn.layers.plugins.eca import ECA, eca_kernel_size
from vision_attn.layers.plugins.identity_blend import IdentityBlend
from vision_attn.layers.plugins.registry import ATTENTION_BLOCKS, get_attention, register_attention
from vision_attn.layers.plugins.se import SqueezeExcite

__all__ = [
    "SqueezeExcite", "CBAM", "ChannelAttention", "SpatialAttention", "UltralyticsCBAM",
    "UltralyticsChannelAttention", "UltralyticsSpatialAttention", "ECA", "eca_kernel_size", "CoordAttention",
    "IdentityBlend", "ATTENTION_BLOCKS", "get_attention", "register_attention", "check_nchw", "reduced_channels",
]
