"""The input of a NaFlex-capable model (SigLIP 2): a padded batch of patch sequences, and the patch
order its patch embedding reads (:mod:`vision_attn.data.naflex` makes such batches from images)."""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from vision_attn.errors import CheckpointError

__all__ = ["NaFlexBatch", "linear_to_conv_patches"]


class NaFlexBatch(NamedTuple):
    """A padded batch of patch sequences: ``patches`` (B, N, P*P*C), ``mask`` (B, N) boolean (True: a
    real patch, False: padding), ``shapes`` (B, 2) long, each image's patch grid (h, w), its h*w
    patches first in its sequence, row by row. transformers' ``pixel_values``,
    ``pixel_attention_mask`` and ``spatial_shapes``."""

    patches: torch.Tensor
    mask: torch.Tensor
    shapes: torch.Tensor

    def to(self, *args, **kwargs) -> "NaFlexBatch":
        """Patches moved (and cast) as ``Tensor.to``; the mask and shapes moved only."""
        patches = self.patches.to(*args, **kwargs)
        return NaFlexBatch(patches, self.mask.to(patches.device), self.shapes.to(patches.device))


def linear_to_conv_patches(weight: torch.Tensor, in_chans: int, what: str) -> torch.Tensor:
    """A patch embedding Linear (D, P*P*C) over patches flattened in (row in patch, column in patch,
    channel) order (:func:`~vision_attn.data.naflex.patchify`'s) -> the patch convolution (D, C, P, P)
    that computes the same on the image; ``what`` names the tensor in the error."""
    dim, flat = weight.shape
    patch = math.isqrt(flat // in_chans) if flat % in_chans == 0 else 0
    if patch < 1 or patch * patch * in_chans != flat:
        raise CheckpointError(f"{what}: a patch embedding of {flat} inputs is not square patches of {in_chans} channels")
    return weight.reshape(dim, patch, patch, in_chans).permute(0, 3, 1, 2).contiguous()
