"""JPEG decoding and the train crop, flip and normalisation on a device, one batch at a time.

On a GPU the image-folder loader (PIL decoding and albumentations in CPU worker processes) feeds a
few hundred images per second per worker, while an H200 trains ViT-S on about 5,000 a second.
:class:`DeviceDecodeAugment` takes the files' bytes instead: ``torchvision.io.decode_jpeg`` decodes
the whole batch on the device (nvJPEG on CUDA), then each image gets a random resized crop
(bilinear, antialiased; scale and ratio as ``RandomResizedCrop``), a random horizontal flip, and
the batch is normalised, all on the device. The CPU only reads files. On the CPU the same code runs
with torchvision's CPU decoder (used by the tests and the dry run of `tools/bench.py gpu`).
"""
from __future__ import annotations

import math
import warnings
from typing import Sequence

import torch
import torch.nn.functional as F
from torchvision.io import ImageReadMode, decode_jpeg

from vision_attn.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from vision_attn.errors import ConfigError

__all__ = ["DeviceDecodeAugment", "crop_box"]


def crop_box(height: int, width: int, scale: Sequence[float], ratio: Sequence[float],
             generator: torch.Generator) -> tuple[int, int, int, int]:
    """(top, left, h, w) of a random crop covering ``scale`` of the area at an aspect ratio (w/h) in
    ``ratio`` (log-uniform), as ``RandomResizedCrop`` draws it: ten tries, then the largest central
    crop whose ratio is clamped to the range."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        u = torch.rand(2, generator=generator).tolist()
        target = area * (scale[0] + (scale[1] - scale[0]) * u[0])
        aspect = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * u[1])
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(0, height - h + 1, (1,), generator=generator))
            left = int(torch.randint(0, width - w + 1, (1,), generator=generator))
            return top, left, h, w
    aspect = width / height
    if aspect < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif aspect > ratio[1]:
        w, h = round(height * ratio[1]), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class DeviceDecodeAugment:
    """Encoded JPEGs (1-D uint8 tensors, e.g. ``torchvision.io.read_file``) -> a normalised float32
    batch (B, 3, size, size) on ``device``: decode, random resized crop, flip, normalise there."""

    def __init__(self, img_size: int, device: str | torch.device = "cuda", *, scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3 / 4, 4 / 3), hflip: float = 0.5,
                 mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD, seed: int = 0) -> None:
        if not (len(scale) == 2 and 0 < scale[0] <= scale[1] <= 1):
            raise ConfigError(f"scale={list(scale)}: give [min, max] area fractions with 0 < min <= max <= 1")
        if not (len(ratio) == 2 and 0 < ratio[0] <= ratio[1]):
            raise ConfigError(f"ratio={list(ratio)}: give [min, max] aspect ratios with 0 < min <= max")
        self.size, self.device = img_size, torch.device(device)
        self.scale, self.ratio, self.hflip = tuple(scale), tuple(ratio), hflip
        self.mean = torch.tensor(mean, device=self.device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(std, device=self.device).view(1, 3, 1, 1) * 255
        self.generator = torch.Generator().manual_seed(seed)  # crop boxes and flips: drawn on the CPU

    def __call__(self, jpegs: list[torch.Tensor]) -> torch.Tensor:
        with warnings.catch_warnings():  # torchvision 0.29 marks its decoders deprecated (for TorchCodec)
            warnings.simplefilter("ignore", DeprecationWarning)
            images = decode_jpeg(jpegs, mode=ImageReadMode.RGB, device=self.device)
        out = torch.empty(len(images), 3, self.size, self.size, device=self.device)
        for i, img in enumerate(images):  # one crop per image: the sizes differ
            top, left, h, w = crop_box(img.shape[-2], img.shape[-1], self.scale, self.ratio, self.generator)
            crop = img[None, :, top:top + h, left:left + w].float()
            out[i] = F.interpolate(crop, size=(self.size, self.size), mode="bilinear", antialias=True,
                                   align_corners=False)[0]
        flip = (torch.rand(len(images), generator=self.generator) < self.hflip).to(self.device)
        out = torch.where(flip.view(-1, 1, 1, 1), out.flip(-1), out)
        return (out - self.mean) / self.std
