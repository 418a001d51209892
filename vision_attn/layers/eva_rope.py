"""EVA-02's rotary position embedding (Fang et al. 2023; timm's ``RotaryEmbeddingCat`` as its EVA-02
models build it): 2D, the channels of each head rotated in interleaved pairs (2i, 2i+1), a quarter of
the head's channels per frequency band and axis, positions on an index grid rescaled to a reference
grid (the pre-training one), so that a larger image spreads the same range of angles.

:class:`RopeEva` gives the (cos, sin) tables for a grid (kept out of the state dict, built on every
new grid); :func:`apply_rope_interleaved` rotates queries or keys, leaving the prefix tokens as they are.
"""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers.patch_embed import to_2tuple
from vision_attn.layers.tables import Tables


class RopeEva(nn.Module):
    """Tables (H*W, head_dim) for ``forward(grid)``: for row y and column x of the grid, scaled to
    ``ref_grid`` (``y / H * ref_H``), the angles ``[y * f_0 .. y * f_{n-1}, x * f_0 .. x * f_{n-1}]``
    with ``f_i = temperature ** (-i / n)``, ``n = head_dim / 4``, each repeated twice (one pair)."""

    def __init__(self, head_dim: int, ref_grid: int | tuple[int, int], temperature: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 4:
            raise ConfigError(f"EVA's rotary embedding needs a head dimension divisible by 4, got {head_dim}")
        self.head_dim = head_dim
        self.ref_grid = to_2tuple(ref_grid)
        self.temperature = temperature
        self._tables = Tables()

    def forward(self, grid: tuple[int, int], device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        def build() -> tuple[torch.Tensor, torch.Tensor]:
            n = self.head_dim // 4
            bands = 1.0 / self.temperature ** (torch.arange(n, device=device, dtype=torch.float32) / n)  # (n,)
            axes = [torch.arange(s, device=device, dtype=torch.float32) / s * r for s, r in zip(grid, self.ref_grid)]
            coords = torch.stack(torch.meshgrid(axes, indexing="ij"), dim=-1)  # (H, W, 2): (y, x)
            ang = (coords[..., None] * bands).flatten(-2).flatten(0, -2)  # (H*W, 2n): y bands, then x bands
            ang = ang.repeat_interleave(2, dim=-1)  # (H*W, head_dim): each angle for one pair of channels
            return ang.cos().to(dtype), ang.sin().to(dtype)
        return self._tables.get((tuple(grid), device, dtype), build, *grid)


def apply_rope_interleaved(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the last ``cos.shape[0]`` tokens of ``t`` (B, heads, N, d) pair by pair: channels
    (2i, 2i+1) -> (x cos - y sin, y cos + x sin); earlier (prefix) tokens pass."""
    n_prefix = t.shape[-2] - cos.shape[0]
    prefix, x = t[..., :n_prefix, :], t[..., n_prefix:, :]
    B, H, N, d = x.shape
    pairs = x.reshape(B, H, N, d // 2, 2)  # dimensions spelled out: TorchScript's ONNX exporter loses the rank here
    rotated = torch.stack([-pairs[:, :, :, :, 1], pairs[:, :, :, :, 0]], dim=4).reshape(B, H, N, d)
    return torch.cat([prefix, x * cos + rotated * sin], dim=-2)
