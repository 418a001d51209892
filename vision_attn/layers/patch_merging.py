"""Patch merging (Swin): halve a map's resolution by concatenating each 2x2 neighbourhood.

:class:`PatchMerging` (Swin V1) normalises the 4C concatenation and then projects it;
:class:`PatchMergingV2` (Swin V2) projects first and normalises the projection."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn



def pad_to_even(x: torch.Tensor) -> torch.Tensor:
    """(B, H, W, C) with zeros added at the bottom / right where H / W is odd (no copy when even)."""
    H, W = x.shape[1:3]
    return F.pad(x, (0, 0, 0, W % 2, 0, H % 2)) if H % 2 or W % 2 else x


torch.fx.wrap("pad_to_even")  # torch.fx symbolic tracing: one leaf node, not a branch on a traced size


class PatchMerging(nn.Module):
    """(B, H, W, C) -> (B, ceil(H/2), ceil(W/2), out_dim), NHWC.

    Each 2x2 neighbourhood is concatenated in the order (0,0), (1,0), (0,1), (1,1) as (row, column)
    offsets, the order of the official code, timm and torchvision, then normalised over 4C and
    projected by a linear layer without bias (4C -> 2C by default). An odd height or width is padded
    with zeros at the bottom or right first. Keys ``norm`` and ``reduction``.
    """

    def __init__(self, dim: int, out_dim: int | None = None, norm_layer: type[nn.Module] = nn.LayerNorm) -> None:
        super().__init__()
        self.dim = dim
        self.out_dim = out_dim or 2 * dim
        self.norm = norm_layer(self._norm_features())
        self.reduction = nn.Linear(4 * dim, self.out_dim, bias=False)

    def _norm_features(self) -> int:
        return 4 * self.dim

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H, W, C) -> the concatenated neighbourhoods (B, ceil(H/2), ceil(W/2), 4C)."""
        x = pad_to_even(x)
        B, H, W, C = x.shape
        # (B, H/2, row offset, W/2, column offset, C) -> (B, H/2, W/2, column offset, row offset, C)
        return x.view(B, H // 2, 2, W // 2, 2, C).permute(0, 1, 3, 4, 2, 5).reshape(B, H // 2, W // 2, 4 * C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.reduction(self.norm(self.merge(x)))  # (B, H/2, W/2, out_dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, out_dim={self.out_dim}"


class PatchMergingV2(PatchMerging):
    """Swin V2's patch merging: the same 2x2 concatenation, projected (4C -> out_dim, no bias) and
    then normalised over ``out_dim``; (B, H, W, C) -> (B, ceil(H/2), ceil(W/2), out_dim). Keys
    ``reduction`` and ``norm`` (timm's, torchvision's and the official layout)."""

    def _norm_features(self) -> int:
        return self.out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.reduction(self.merge(x)))
