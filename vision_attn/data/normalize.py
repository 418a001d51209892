"""The normalisation of uint8 pixels, wherever the images are: ``(x - 255 mean) * (1 / (255 std))`` in
float32, with the constants of albumentations' ``Normalize`` (the last step of
:mod:`~vision_attn.data.transforms`' pipelines before ``ToTensorV2``).

:class:`~vision_attn.data.file_transforms.FileTransform` normalises an image with it in the loader
(``normalize_on="loader"``), or returns the (3, H, W) uint8 image and the classification data module
normalises the whole batch with it once the batch is on the training device (``data.normalize:
device``): the same two float32 operations on the same values, so the same tensor, bit for bit.
"""
from __future__ import annotations

import os
from typing import Sequence

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # no network check on import

import albumentations as A  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

__all__ = ["PixelNormalize", "NORMALIZE_ON"]

NORMALIZE_ON = ("device", "loader")
"""Where classification images are normalised: on the training device (uint8 through the loader) or
in the loader (float32 through it)."""


class PixelNormalize:
    """uint8 images (3, H, W) or (B, 3, H, W), on any device -> normalised float32 on that device:
    ``x.float().sub_(sub).mul_(mul)``, ``sub`` = 255 mean and ``mul`` = 1 / (255 std) in float32 as
    ``Normalize(mean, std, max_pixel_value=255)`` holds them. A tensor of another dtype (normalised
    already) is returned as it is."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], max_pixel_value: float = 255.0) -> None:
        self.mean, self.std = tuple(float(m) for m in mean), tuple(float(s) for s in std)
        self.max_pixel_value = float(max_pixel_value)
        normalize = A.Normalize(mean=self.mean, std=self.std, max_pixel_value=self.max_pixel_value)
        self.sub = torch.from_numpy(np.asarray(normalize.mean_np, dtype=np.float32).reshape(3, 1, 1).copy())
        self.mul = torch.from_numpy(np.asarray(normalize.denominator, dtype=np.float32).reshape(3, 1, 1).copy())
        self._on: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {torch.device("cpu"): (self.sub, self.mul)}

    @classmethod
    def of(cls, normalize: A.Normalize) -> "PixelNormalize":
        """The constants of a pipeline's ``Normalize`` step (whether they give its values is
        :class:`~vision_attn.data.file_transforms.FileTransform`'s check against its table)."""
        return cls(normalize.mean, normalize.std, normalize.max_pixel_value)

    def apply_(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (float32, 0..255 values) normalised in place; returned."""
        if x.device not in self._on:
            self._on[x.device] = (self.sub.to(x.device), self.mul.to(x.device))
        sub, mul = self._on[x.device]
        return x.sub_(sub).mul_(mul)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype != torch.uint8:
            return images
        return self.apply_(images.float())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mean={self.mean}, std={self.std}, max_pixel_value={self.max_pixel_value})"
