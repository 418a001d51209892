"""Model families, registered by name; ``create_model`` builds any of them."""
from vision_attn.models import vit  # noqa: F401  (registers the ViT/DeiT variants)
from vision_attn.models import clip  # noqa: F401  (registers the CLIP and SigLIP towers)
from vision_attn.models import eva  # noqa: F401  (registers the EVA-02 variants)
from vision_attn.models import dinov3  # noqa: F401  (registers the DINOv3 ViTs)
from vision_attn.models import convnext  # noqa: F401  (registers the ConvNeXt variants)
from vision_attn.models import hiera  # noqa: F401  (registers the Hiera variants)
from vision_attn.models import sam2_hiera  # noqa: F401  (registers SAM 2's Hiera encoders)
from vision_attn.models import swin  # noqa: F401  (registers the Swin variants)
from vision_attn.models import swin_v2  # noqa: F401  (registers the Swin V2 variants)
from vision_attn.models import cnn  # noqa: F401  (registers torchvision's ResNets and the timm: prefix)
from vision_attn.models.checkpoint import load_checkpoint, read_state_dict
from vision_attn.models.insert import Insertion, InsertionReport, insert_attention
from vision_attn.models.registry import create_model, list_models, register_model
from vision_attn.models.vit import VisionTransformer
from vision_attn.models.yolo import build_detector

__all__ = ["create_model", "list_models", "register_model", "load_checkpoint", "read_state_dict", "VisionTransformer",
           "insert_attention", "Insertion", "InsertionReport", "build_detector"]
