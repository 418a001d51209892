"""DINOv3's rotary position embedding (Siméoni et al. 2025; timm's ``RotaryEmbeddingDinoV3``,
transformers' ``DINOv3ViTRopePositionEmbedding``): 2D, the rotate-half layout of
:class:`~vision_attn.layers.pos_embed.Rope2D` (the first half of a head's channels paired with the
second, row bands then column bands; :func:`~vision_attn.layers.pos_embed.apply_rope` rotates), with
other positions and periods:

- each patch's centre on a grid normalised to [-1, 1] per axis (``(i + 0.5) / H * 2 - 1``), so that
  every image size spans the same range of angles;
- periods ``temperature ** (i / n)``, ``n = head_dim / 4``, angles ``2 pi * coordinate / period``;
- in training only, DINOv3's augmentation of the coordinates, one draw per forward pass (the order
  of the peers' draws): a shift uniform in [-shift, shift] per axis, a jitter factor log-uniform in
  [1/jitter, jitter] per axis, a rescale factor log-uniform in [1/rescale, rescale] for both.

The tables are built on every call (:class:`~vision_attn.layers.tables.Tables`); an augmented table
(training with an augmentation set) is never kept.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers.tables import Tables

__all__ = ["RopeDinov3", "centred_coords", "augment_coords"]


def centred_coords(grid: tuple[int, int], device: torch.device | None = None) -> torch.Tensor:
    """Patch centres (H*W, 2) as (y, x), each axis normalised to [-1, 1] by its own size, float32."""
    axes = [(torch.arange(s, device=device, dtype=torch.float32) + 0.5) / s for s in grid]
    coords = torch.stack(torch.meshgrid(axes, indexing="ij"), dim=-1).flatten(0, 1)  # (H*W, 2) in [0, 1]
    return 2.0 * coords - 1.0


def augment_coords(coords: torch.Tensor, shift: float | None, jitter: float | None,
                   rescale: float | None) -> torch.Tensor:
    """DINOv3's training-time transform of ``coords`` (N, 2): shift, per-axis jitter, shared rescale
    (each only where set), drawn in that order from torch's generator."""
    if shift is not None:
        coords = coords + torch.empty(2, device=coords.device, dtype=coords.dtype).uniform_(-shift, shift)
    if jitter is not None:
        j = math.log(jitter)
        coords = coords * torch.empty(2, device=coords.device, dtype=coords.dtype).uniform_(-j, j).exp()
    if rescale is not None:
        r = math.log(rescale)
        coords = coords * torch.empty(1, device=coords.device, dtype=coords.dtype).uniform_(-r, r).exp()
    return coords


class RopeDinov3(nn.Module):
    """Tables (cos, sin), each (H*W, head_dim), for ``forward(grid, device, dtype)`` (see the module).
    ``shift``, ``jitter``, ``rescale``: the training-time augmentation (None: off; timm's DINOv3
    models set none, transformers' config ``pos_embed_rescale=2.0`` by default)."""

    def __init__(self, head_dim: int, temperature: float = 100.0, shift: float | None = None,
                 jitter: float | None = None, rescale: float | None = None) -> None:
        super().__init__()
        if head_dim % 4:
            raise ConfigError(f"DINOv3's rotary embedding needs a head dimension divisible by 4, got {head_dim}")
        for name, value, low in (("rope_shift", shift, 0.0), ("rope_jitter", jitter, 1.0), ("rope_rescale", rescale, 1.0)):
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value >= low):
                raise ConfigError(f"{name}={value!r}: give a finite number >= {low} (or None: no augmentation)")
        self.head_dim = head_dim
        self.temperature = float(temperature)
        self.shift, self.jitter, self.rescale = shift, jitter, rescale
        self._tables = Tables()

    @property
    def augments(self) -> bool:
        """Whether the coordinates are augmented now (training, and an augmentation set)."""
        return self.training and any(v is not None for v in (self.shift, self.jitter, self.rescale))

    def _build(self, grid: tuple[int, int], device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        n = self.head_dim // 4
        periods = self.temperature ** (torch.arange(n, device=device, dtype=torch.float32) / n)  # (n,)
        coords = centred_coords(grid, device)  # (H*W, 2)
        if self.augments:
            coords = augment_coords(coords, self.shift, self.jitter, self.rescale)
        ang = (2 * math.pi * coords[:, :, None] / periods).flatten(1)  # (H*W, d/2): row bands, then column bands
        ang = torch.cat([ang, ang], dim=-1)  # (H*W, d): rotate-half pairs channel i with i + d/2
        return ang.cos().to(dtype), ang.sin().to(dtype)

    def forward(self, grid: tuple[int, int], device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        if self.augments:  # a fresh draw every pass: never a kept table
            return self._build(tuple(grid), device, dtype)
        return self._tables.get((tuple(grid), device, dtype), lambda: self._build(tuple(grid), device, dtype), *grid)
