"""Hugging Face ``transformers`` folders (``config.json`` + weights) as vision_attn models, and back.

``create_model(name, pretrained=FOLDER)`` reads the folder (:func:`read_transformers_folder`),
builds the architecture its config states (``name`` may be omitted: the folder says what it is) and
loads the weights with :func:`load_transformers`. The families that map each ``model_type``
register themselves on import: ``hf/vit.py`` (ViT, DeiT, DINOv2), ``hf/swin.py`` (Swin, Swin V2),
``hf/clip.py`` (CLIP and SigLIP vision towers), ``hf/siglip2.py`` (SigLIP 2 towers, NaFlex included), ``hf/dinov3.py`` (DINOv3 ViTs), ``hf/convnext.py`` (DINOv3 ConvNeXts), ``hf/hiera.py`` (Hiera).
"""
from __future__ import annotations

import warnings
from typing import Collection

from torch import nn

from vision_attn.errors import CheckpointError
from vision_attn.models.checkpoint import load_state_dict
from vision_attn.models.hf.family import FAMILIES, Family, family_of
from vision_attn.models.hf.folder import TransformersFolder, read_transformers_folder, transformers_folder
from vision_attn.models.hf import clip, convnext, dinov3, hiera, siglip2, swin, vit  # noqa: F401  (each registers its families)

__all__ = ["FAMILIES", "Family", "TransformersFolder", "family_of", "load_transformers", "read_transformers_folder",
           "transformers_folder"]


def load_transformers(model: nn.Module, folder: TransformersFolder, optional: Collection[str] = ()) -> nn.Module:
    """Load ``folder``'s weights into ``model`` (built from ``folder.model_args()``). The file's head is
    kept when ``model`` has as many classes, replaced (fresh, with a warning) when it has another
    count, dropped (with a warning) when it has none; ``optional``: keys of inserted blocks."""
    file_classes = int(folder.model_args()[1].get("num_classes", 0))
    state = folder.our_state_dict()
    head = set(getattr(model, "classifier_keys", ()))
    own = model.state_dict()
    if getattr(model, "num_classes", None) == file_classes > 0:
        other = [f"{k} {tuple(state[k].shape)}" for k in head if k in state and k in own and state[k].shape != own[k].shape]
        if other:  # as many classes, other features (DINOv2's head on the class token and the patch mean)
            raise CheckpointError(
                f"{folder.source}: the file's classifier ({', '.join(other)}) reads other features than "
                f"{type(model).__name__}'s head can: it cannot be kept; pass num_classes=0 (pooled features) or "
                f"num_classes=N (a fresh head)")
    if getattr(model, "num_classes", None) == 0 and file_classes > 0:
        state = {k: v for k, v in state.items() if k not in head}
        warnings.warn(f"{folder.source}: the file's classifier ({file_classes} classes) is dropped "
                      f"(num_classes=0): the model returns pooled features", stacklevel=3)
    return load_state_dict(model, state, source=f"{folder.source} (with {folder.folder / 'config.json'})",
                           optional=optional, hint="the config's sizes and the weights disagree (an edited config, or "
                           "weights of another model): download the folder again, or pass the sizes the weights have")
