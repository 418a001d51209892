"""Position embeddings, as named options.

- ``"learn"``: a learned table (1, prefix + H*W, D) added to the tokens; resampled bicubically when
  the grid changes (:func:`resample_abs_pos_embed`): antialiased, as timm does, or without
  antialiasing, as transformers' ViT, DeiT and DINOv2 do (:data:`POS_EMBED_INTERPS`, a model's
  ``pos_embed_interp``), so that a checkpoint computes what its source computes; SigLIP 2's table
  is resampled bilinearly with antialiasing to each image's own grid.
- ``"sincos2d"``: fixed 2D sine-cosine (MoCo v3, big_vision), computed for the run-time grid; no
  parameters and nothing in the state dict.
- ``"rope"``: 2D rotary embedding applied to queries and keys inside attention (:class:`Rope2D`).
- ``"rope_dinov3"``: DINOv3's 2D rotary embedding (:class:`~vision_attn.layers.rope_dinov3.RopeDinov3`):
  patch centres normalised to [-1, 1], periods ``temperature ** (i / n)``, and in training its
  shift / jitter / rescale augmentation of the coordinates.
- ``"learn_rope"``: a learned table and EVA-02's rotary embedding
  (:class:`~vision_attn.layers.eva_rope.RopeEva`, with :class:`~vision_attn.layers.eva_attention.EvaAttention`).
- ``"none"``: no position information.
"""
from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers.tables import Tables

PosEmbedKind = Literal["learn", "sincos2d", "rope", "rope_dinov3", "learn_rope", "none"]
POS_EMBED_KINDS: tuple[str, ...] = ("learn", "sincos2d", "rope", "rope_dinov3", "learn_rope", "none")
POS_EMBED_INTERPS: dict[str, dict[str, object]] = {
    "timm": dict(mode="bicubic", antialias=True),
    "transformers": dict(mode="bicubic", antialias=False),
    "siglip2": dict(mode="bilinear", antialias=True),
}
"""How a learned table is resampled to another grid (the keyword arguments of
:func:`resample_abs_pos_embed`): ``"timm"`` (antialiased bicubic), ``"transformers"`` (bicubic without
antialiasing, transformers' ``interpolate_pos_encoding``) or ``"siglip2"`` (antialiased bilinear, to
each image's own grid: transformers' SigLIP 2 and timm's NaFlex ViTs)."""


def check_pos_embed_kind(kind: str) -> str:
    if kind not in POS_EMBED_KINDS:
        raise ConfigError(f"pos_embed={kind!r} is not a known position embedding: choose one of {POS_EMBED_KINDS}")
    return kind


def resample_abs_pos_embed(
    pos_embed: torch.Tensor,
    new_grid: tuple[int, int],
    old_grid: tuple[int, int] | None = None,
    num_prefix_tokens: int = 1,
    antialias: bool = True,
    mode: str = "bicubic",
) -> torch.Tensor:
    """Resample a learned table (1, prefix + h*w, D) to ``new_grid`` with ``mode`` interpolation in
    float32 (``antialias``: timm's; without it, transformers' ``interpolate_pos_encoding`` of ViT,
    DeiT and DINOv2); the prefix rows (class, distillation tokens) are kept as they are."""
    n_grid = pos_embed.shape[1] - num_prefix_tokens
    if old_grid is None:
        side = math.isqrt(n_grid)
        if side * side != n_grid:
            raise ConfigError(
                f"cannot infer the grid of a position embedding with {n_grid} patch rows: pass old_grid"
            )
        old_grid = (side, side)
    if tuple(old_grid) == tuple(new_grid):
        return pos_embed
    prefix, grid = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    dim = pos_embed.shape[-1]
    grid = grid.float().reshape(1, old_grid[0], old_grid[1], dim).permute(0, 3, 1, 2)  # (1, D, h, w)
    grid = F.interpolate(grid, size=tuple(new_grid), mode=mode, antialias=antialias, align_corners=False)
    grid = grid.permute(0, 2, 3, 1).reshape(1, -1, dim).to(pos_embed.dtype)  # (1, H*W, D)
    return torch.cat([prefix, grid], dim=1)


def sincos_2d(grid: tuple[int, int], dim: int, temperature: float = 10000.0,
              device: torch.device | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Fixed 2D sine-cosine embedding (H*W, D): a quarter of the channels each for sin(x), cos(x),
    sin(y), cos(y), with geometric frequencies (big_vision's ``posemb_sincos_2d``)."""
    if dim % 4:
        raise ConfigError(f"sincos2d position embedding needs embed_dim divisible by 4, got {dim}")
    h, w = grid
    y, x = torch.meshgrid(torch.arange(h, device=device, dtype=torch.float32),
                          torch.arange(w, device=device, dtype=torch.float32), indexing="ij")
    omega = torch.arange(dim // 4, device=device, dtype=torch.float32) / max(dim // 4 - 1, 1)
    omega = 1.0 / temperature**omega  # (D/4,)
    x = x.flatten()[:, None] * omega[None, :]  # (H*W, D/4)
    y = y.flatten()[:, None] * omega[None, :]
    return torch.cat([x.sin(), x.cos(), y.sin(), y.cos()], dim=1).to(dtype)  # (H*W, D)


class Rope2D(nn.Module):
    """Axial 2D rotary position embedding (Heo et al. 2024, "RoPE-Axial"): the first half of each
    head's channels rotate with the row index, the second half with the column index.

    ``forward(grid)`` returns the (cos, sin) tables (H*W, head_dim) for that grid, cached outside the
    state dict; :func:`apply_rope` rotates queries or keys, leaving the prefix tokens unrotated.
    """

    def __init__(self, head_dim: int, theta: float = 100.0) -> None:
        super().__init__()
        if head_dim % 4:
            raise ConfigError(f"rope position embedding needs a head dimension divisible by 4, got {head_dim}")
        self.head_dim = head_dim
        self.theta = theta
        self._tables = Tables()

    def forward(self, grid: tuple[int, int], device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        def build() -> tuple[torch.Tensor, torch.Tensor]:
            h, w = grid
            quarter = self.head_dim // 4
            freqs = 1.0 / self.theta ** (torch.arange(quarter, device=device, dtype=torch.float32) / quarter)  # (d/4,)
            y, x = torch.meshgrid(torch.arange(h, device=device, dtype=torch.float32),
                                  torch.arange(w, device=device, dtype=torch.float32), indexing="ij")
            ang = torch.cat([y.flatten()[:, None] * freqs, x.flatten()[:, None] * freqs], dim=1)  # (H*W, d/2)
            ang = torch.cat([ang, ang], dim=1)  # (H*W, d): rotate-half pairs channel i with i + d/2
            return ang.cos().to(dtype), ang.sin().to(dtype)
        return self._tables.get((tuple(grid), device, dtype), build, *grid)


def apply_rope(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the last ``cos.shape[0]`` tokens of ``t`` (B, heads, N, d); earlier (prefix) tokens pass."""
    n_prefix = t.shape[-2] - cos.shape[0]
    prefix, x = t[..., :n_prefix, :], t[..., n_prefix:, :]
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return torch.cat([prefix, x * cos + rotated * sin], dim=-2)
