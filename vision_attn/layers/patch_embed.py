"""Image to patch tokens: a strided convolution, optionally padding the image to a patch multiple."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import ConfigError, DataError


def to_2tuple(x: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    if isinstance(x, int):
        return (x, x)
    if len(x) != 2:
        raise ConfigError(f"expected an int or a pair (height, width), got {x!r}")
    return (int(x[0]), int(x[1]))


def fit_to_patches(x: torch.Tensor, in_chans: int, patch_size: tuple[int, int], pad: bool) -> torch.Tensor:
    """Check that ``x`` is (B, in_chans, H, W); an H or W that is not a patch multiple is padded
    with zeros at the bottom / right (``pad``) or refused."""
    if x.ndim != 4 or x.shape[1] != in_chans:
        raise DataError(
            f"expected images of shape (batch, {in_chans}, height, width), got {tuple(x.shape)}: "
            f"convert the images to {in_chans} channels or build the model with in_chans={x.shape[1] if x.ndim == 4 else '...'}"
        )
    H, W = x.shape[-2:]
    ph, pw = patch_size
    if H % ph or W % pw:
        if not pad:
            raise DataError(
                f"image size {H}x{W} is not divisible by the patch size {ph}x{pw}: resize or crop to a "
                f"multiple of the patch size, or build the model with dynamic_img_pad=True"
            )
        x = F.pad(x, (0, -W % pw, 0, -H % ph))
    return x


torch.fx.wrap("fit_to_patches")  # torch.fx symbolic tracing: one leaf node, not a branch on a traced size


class PatchEmbed(nn.Module):
    """Split an image into non-overlapping patches and project each to ``embed_dim``.

    Takes (B, C, H, W); returns the token grid (B, H/p, W/p, D) in NHWC, so callers know the grid
    size when the image size differs from the configured one. With ``dynamic_pad`` an image whose
    size is not a patch multiple is zero-padded on the bottom and right; otherwise it is an error.
    The key ``proj`` matches timm's layout.
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        patch_size: int | tuple[int, int] = 16,
        in_chans: int = 3,
        embed_dim: int = 768,
        bias: bool = True,
        norm_layer: type[nn.Module] | None = None,
        dynamic_pad: bool = False,
    ) -> None:
        super().__init__()
        self.img_size = to_2tuple(img_size)
        self.patch_size = to_2tuple(patch_size)
        if not dynamic_pad:
            for size, patch in zip(self.img_size, self.patch_size):
                if size % patch:
                    raise ConfigError(
                        f"img_size {self.img_size} is not divisible by patch_size {self.patch_size}: "
                        f"use a multiple of {self.patch_size} or build the model with dynamic_img_pad=True to pad the image"
                    )
        self.grid_size = tuple(-(-s // p) for s, p in zip(self.img_size, self.patch_size))
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.in_chans = in_chans
        self.dynamic_pad = dynamic_pad
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=self.patch_size, stride=self.patch_size, bias=bias)
        self.norm = norm_layer(embed_dim) if norm_layer else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = fit_to_patches(x, self.in_chans, self.patch_size, self.dynamic_pad)
        x = self.proj(x)  # (B, D, H/p, W/p)
        return self.norm(x.permute(0, 2, 3, 1))  # (B, H/p, W/p, D)
