"""vision_attn: attention for computer vision.

Readable ViT/DeiT models that load timm and torchvision checkpoints, built from small layers, with
tools to count FLOPs and compare models.
"""
from vision_attn.errors import CheckpointError, ConfigError, DataError, VisionAttnError
from vision_attn.models import create_model, list_models

__version__ = "0.1.0"
__all__ = ["create_model", "list_models", "VisionAttnError", "ConfigError", "DataError", "CheckpointError"]
