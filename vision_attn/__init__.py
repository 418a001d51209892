"""vision_attn: attention for computer vision.

Readable ViT/DeiT models that load timm and torchvision checkpoints, built from small layers, with
tools to count FLOPs and compare models.
"""
from vision_attn.errors import CheckpointError, ConfigError, DataError, VisionAttnError
from vision_attn.layers.plugins import get_attention
from vision_attn.models import build_detector, create_model, insert_attention, list_models

__version__ = "0.1.0"
__all__ = ["create_model", "build_detector", "list_models", "insert_attention", "get_attention", "VisionAttnError", "ConfigError", "DataError", "CheckpointError"]
