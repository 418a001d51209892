"""Model families, registered by name; ``create_model`` builds any of them."""
from vision_attn.models import vit  # noqa: F401  (registers the ViT/DeiT variants)
from vision_attn.models.checkpoint import load_checkpoint, read_state_dict
from vision_attn.models.registry import create_model, list_models, register_model
from vision_attn.models.vit import VisionTransformer

__all__ = ["create_model", "list_models", "register_model", "load_checkpoint", "read_state_dict", "VisionTransformer"]
