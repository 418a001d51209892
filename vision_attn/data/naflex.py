"""NaFlex inputs (SigLIP 2, Tschannen et al. 2025): each image at its own aspect ratio, as a sequence of
patches within a token budget, padded to a batch with a mask.

An image (C, H, W) is resized to the largest size whose patch grid (h, w) keeps its aspect ratio (each
side rounded up to a multiple of the patch) and holds at most ``max_patches`` patches
(:func:`naflex_size`: the size transformers' ``Siglip2ImageProcessor`` picks), then cut into patches
flattened in (row in patch, column in patch, channel) order (:func:`patchify`: the processor's and
timm's NaFlex order). :func:`collate_patches` pads the sequences of a batch to a common length and
returns a :class:`~vision_attn.layers.naflex_batch.NaFlexBatch`, the input a NaFlex-capable ViT takes
(:meth:`~vision_attn.models.vit.VisionTransformer.forward`).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F

from vision_attn.errors import ConfigError, DataError
from vision_attn.layers.naflex_batch import NaFlexBatch

__all__ = ["NaFlexBatch", "naflex_size", "patchify", "to_patches", "collate_patches", "NaFlexCollate"]


def _check_budget(patch: int, max_patches: int) -> None:
    if not isinstance(max_patches, int) or isinstance(max_patches, bool) or max_patches < 1:
        raise ConfigError(f"NaFlex token budget {max_patches!r}: give the largest number of patches per image (>= 1)")
    if not isinstance(patch, int) or patch < 1:
        raise ConfigError(f"NaFlex patch size {patch!r}: give a positive integer")


def naflex_size(height: int, width: int, patch: int, max_patches: int) -> tuple[int, int]:
    """(H, W) in pixels, multiples of ``patch``, for an image of ``height`` x ``width``: the largest
    scale whose grid, each side ``ceil(side * scale / patch)`` patches (at least 1), holds at most
    ``max_patches`` patches; the aspect ratio kept as nearly as the rounding allows."""
    _check_budget(patch, max_patches)

    def grid(scale: float) -> tuple[int, int]:
        return (max(1, math.ceil(height * scale / patch)), max(1, math.ceil(width * scale / patch)))

    lo, hi = 1e-6, 100.0  # the patch count rises with the scale: bisect for the largest that fits
    while hi - lo >= 1e-5:
        mid = (lo + hi) / 2
        h, w = grid(mid)
        lo, hi = (mid, hi) if h * w <= max_patches else (lo, mid)
    h, w = grid(lo)
    return h * patch, w * patch


def patchify(image: torch.Tensor, patch: int) -> torch.Tensor:
    """(C, H, W), sides multiples of ``patch`` -> (h*w, P*P*C) patches, row by row, each flattened in
    (row in patch, column in patch, channel) order."""
    C, H, W = image.shape
    if H % patch or W % patch:
        raise DataError(f"image of {H}x{W} px: the sides must be multiples of the patch size {patch}")
    h, w = H // patch, W // patch
    return image.reshape(C, h, patch, w, patch).permute(1, 3, 2, 4, 0).reshape(h * w, patch * patch * C)


def to_patches(image: torch.Tensor, patch: int, max_patches: int,
               mode: str = "bilinear") -> tuple[torch.Tensor, tuple[int, int]]:
    """A float image (C, H, W) resized (``mode``, antialiased) to :func:`naflex_size` and patchified:
    (h*w, P*P*C) and the grid (h, w)."""
    H, W = naflex_size(image.shape[-2], image.shape[-1], patch, max_patches)
    if (H, W) != tuple(image.shape[-2:]):
        antialias = mode in ("bilinear", "bicubic")
        image = F.interpolate(image[None].float(), size=(H, W), mode=mode, antialias=antialias,
                              **({"align_corners": False} if antialias else {}))[0]
    return patchify(image, patch), (H // patch, W // patch)


def collate_patches(items: Sequence[tuple[torch.Tensor, tuple[int, int]]], length: int | None = None) -> NaFlexBatch:
    """(patches (n_i, P*P*C), grid (h_i, w_i)) per image -> a :class:`NaFlexBatch` padded with zeros to
    ``length`` (None: the longest sequence of the batch)."""
    if not items:
        raise DataError("NaFlex batch: no images")
    longest = max(p.shape[0] for p, _ in items)
    length = longest if length is None else length
    if length < longest:
        raise DataError(f"NaFlex batch: an image has {longest} patches, more than the length {length}")
    first = items[0][0]
    patches = first.new_zeros(len(items), length, first.shape[1])
    mask = torch.zeros(len(items), length, dtype=torch.bool)
    for i, (p, (h, w)) in enumerate(items):
        if p.shape[0] != h * w:
            raise DataError(f"NaFlex batch: image {i} has {p.shape[0]} patches, not its grid's {h}x{w}")
        patches[i, : p.shape[0]] = p
        mask[i, : p.shape[0]] = True
    shapes = torch.tensor([grid for _, grid in items], dtype=torch.long)
    return NaFlexBatch(patches, mask, shapes)


class NaFlexCollate:
    """A loader's ``collate_fn`` for classification: items (image (C, H, W) float, at its own size;
    label) -> (:class:`NaFlexBatch` of the images patchified within ``max_patches`` each, padded to the
    batch's longest sequence; labels (B,)). Items (image, label, seq_len), a token budget's batch
    (:class:`~vision_attn.data.naflex_budget.NaFlexBatchSampler`), are patchified within that
    ``seq_len`` and padded to it, as timm's NaFlex loader pads each batch to its sequence length."""

    def __init__(self, patch: int, max_patches: int) -> None:
        _check_budget(patch, max_patches)
        self.patch, self.max_patches = patch, max_patches

    def __call__(self, items: Sequence[tuple]) -> tuple[NaFlexBatch, torch.Tensor]:
        seq_len = int(items[0][2]) if items and len(items[0]) > 2 else None
        budget = self.max_patches if seq_len is None else seq_len
        batch = collate_patches([to_patches(item[0], self.patch, budget) for item in items], seq_len)
        return batch, torch.tensor([int(item[1]) for item in items], dtype=torch.long)
