"""albumentations pipelines for classification: (H, W, 3) uint8 RGB -> (3, h, w) float32 tensor.

Train: random resized crop, horizontal flip, colour jitter, optionally ``n`` RandAugment-style ops
(rotate, shear, translate, equalize, posterize, solarize, sharpen, contrast) at a magnitude out of 10,
optionally random erasing (Zhong et al. 2020, DeiT's ``reprob``), then normalisation. Eval: resize so that the centre crop keeps ``crop_pct`` of the image (timm's
convention: resize to ``size / crop_pct``), centre crop, normalisation. Every pipeline is built with
``Compose(strict=True)``, so an argument that albumentations would silently ignore is an error.
"""
from __future__ import annotations

import math
import os
from typing import Literal, Sequence

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # no network check on import

import albumentations as A  # noqa: E402
import cv2  # noqa: E402
from albumentations.pytorch import ToTensorV2  # noqa: E402

from vision_attn.errors import ConfigError  # noqa: E402

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "INTERPOLATIONS", "train_transforms", "eval_transforms",
           "rand_augment_ops", "naflex_transforms"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
INTERPOLATIONS = {"nearest": cv2.INTER_NEAREST, "bilinear": cv2.INTER_LINEAR, "bicubic": cv2.INTER_CUBIC,
                  "area": cv2.INTER_AREA, "lanczos": cv2.INTER_LANCZOS4}
Interpolation = Literal["nearest", "bilinear", "bicubic", "area", "lanczos"]


def _hw(size: int | Sequence[int]) -> tuple[int, int]:
    hw = (size, size) if isinstance(size, int) else tuple(int(s) for s in size)
    if len(hw) != 2 or min(hw) < 1:
        raise ConfigError(f"img_size={size!r}: give a positive int (square) or [H, W]")
    return hw  # type: ignore[return-value]


def _interp(name: str) -> int:
    if name not in INTERPOLATIONS:
        raise ConfigError(f"interpolation={name!r}: choose one of {', '.join(INTERPOLATIONS)}")
    return INTERPOLATIONS[name]


def _color_jitter(strength: float) -> A.ColorJitter:
    """Brightness, contrast and saturation jitter of ``strength`` (each factor in [1 - s, 1 + s]), p 0.8."""
    cj = float(strength)
    return A.ColorJitter(brightness=(max(0.0, 1 - cj), 1 + cj), contrast=(max(0.0, 1 - cj), 1 + cj),
                         saturation=(max(0.0, 1 - cj), 1 + cj), hue=(0.0, 0.0), p=0.8)


def rand_augment_ops(magnitude: float = 9.0, interpolation: int = cv2.INTER_LINEAR) -> list[A.BasicTransform]:
    """RandAugment-style operations (Cubuk et al. 2020) at ``magnitude`` in [0, 10]; each applies
    with probability 1 once chosen."""
    if not 0 <= magnitude <= 10:
        raise ConfigError(f"rand_augment_magnitude={magnitude}: give a value between 0 and 10")
    m = magnitude / 10.0
    return [
        A.Affine(rotate=(-30 * m, 30 * m), interpolation=interpolation, p=1.0),
        A.Affine(shear={"x": (-17 * m, 17 * m), "y": (0, 0)}, interpolation=interpolation, p=1.0),
        A.Affine(shear={"x": (0, 0), "y": (-17 * m, 17 * m)}, interpolation=interpolation, p=1.0),
        A.Affine(translate_percent={"x": (-0.45 * m, 0.45 * m), "y": (0, 0)}, interpolation=interpolation, p=1.0),
        A.Affine(translate_percent={"x": (0, 0), "y": (-0.45 * m, 0.45 * m)}, interpolation=interpolation, p=1.0),
        A.Equalize(p=1.0),
        A.AutoContrast(p=1.0),
        A.Posterize(num_bits=(max(1, 8 - round(4 * m)), 8), p=1.0),
        A.Solarize(threshold_range=(1.0 - m, 1.0), p=1.0),
        A.Sharpen(alpha=(0.0, 0.9 * m + 1e-3), p=1.0),
        A.RandomBrightnessContrast(brightness_limit=0.9 * m, contrast_limit=0.9 * m, p=1.0),
    ]


def train_transforms(
    img_size: int | Sequence[int],
    *,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3 / 4, 4 / 3),
    hflip: float = 0.5,
    color_jitter: float = 0.4,
    rand_augment: int = 0,
    rand_augment_magnitude: float = 9.0,
    random_erasing: float = 0.0,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    interpolation: Interpolation = "bicubic",
    seed: int | None = None,
) -> A.Compose:
    """The training pipeline: (H, W, 3) uint8 -> (3, h, w) float32; ``rand_augment`` ops per image
    (0: none), ``color_jitter`` strength for brightness, contrast and saturation (0: none).

    ``random_erasing``: the probability of replacing one rectangle (2-33% of the crop's area, aspect
    0.3-3.3, as timm's ``RandomErasing``) by per-pixel random values (0: none; DeiT uses 0.25). timm
    draws them from a standard normal after normalisation; here they are uniform over 0..255 before it,
    which normalises to the same range of a few standard deviations."""
    h, w = _hw(img_size)
    interp = _interp(interpolation)
    if not (len(scale) == 2 and 0 < scale[0] <= scale[1] <= 1):
        raise ConfigError(f"scale={list(scale)}: give [min, max] area fractions with 0 < min <= max <= 1")
    if not (len(ratio) == 2 and 0 < ratio[0] <= ratio[1]):
        raise ConfigError(f"ratio={list(ratio)}: give [min, max] aspect ratios with 0 < min <= max")
    ops: list[A.BasicTransform | A.BaseCompose] = [
        A.RandomResizedCrop(size=(h, w), scale=tuple(scale), ratio=tuple(ratio), interpolation=interp)]
    if hflip > 0:
        ops.append(A.HorizontalFlip(p=hflip))
    if color_jitter > 0:
        ops.append(_color_jitter(color_jitter))
    if rand_augment > 0:
        ops.append(A.SomeOf(rand_augment_ops(rand_augment_magnitude, interp), n=int(rand_augment), p=1.0))
    if not 0 <= random_erasing <= 1:
        raise ConfigError(f"random_erasing={random_erasing}: give a probability between 0 and 1 (DeiT: 0.25)")
    if random_erasing > 0:
        ops.append(A.Erasing(scale=(0.02, 1 / 3), ratio=(0.3, 3.3), fill="random", p=random_erasing))
    ops += [A.Normalize(mean=tuple(mean), std=tuple(std), max_pixel_value=255.0), ToTensorV2()]
    return A.Compose(ops, strict=True, seed=seed)


def eval_transforms(
    img_size: int | Sequence[int],
    *,
    crop_pct: float = 0.875,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    interpolation: Interpolation = "bicubic",
) -> A.Compose:
    """The evaluation pipeline: resize to ``img_size / crop_pct`` (shorter side for a square size),
    centre crop ``img_size``, normalise; (H, W, 3) uint8 -> (3, h, w) float32."""
    h, w = _hw(img_size)
    if not 0 < crop_pct <= 1:
        raise ConfigError(f"crop_pct={crop_pct}: give a fraction in (0, 1] (1.0: no border cropped)")
    interp = _interp(interpolation)
    if h == w:
        resize: A.BasicTransform = A.SmallestMaxSize(max_size=math.floor(h / crop_pct), interpolation=interp)
    else:
        resize = A.Resize(height=math.floor(h / crop_pct), width=math.floor(w / crop_pct), interpolation=interp)
    ops = [resize, A.CenterCrop(height=h, width=w),
           A.Normalize(mean=tuple(mean), std=tuple(std), max_pixel_value=255.0), ToTensorV2()]
    return A.Compose(ops, strict=True)


def naflex_transforms(
    *,
    hflip: float = 0.0,
    color_jitter: float = 0.0,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
) -> A.Compose:
    """NaFlex's pipeline (``data.naflex``): the whole image at its own size and aspect ratio, flipped and
    colour-jittered (training: ``hflip``, ``color_jitter``; 0: none), normalised; (H, W, 3) uint8 ->
    (3, H, W) float32. The resize to the token budget comes after, per image
    (:class:`~vision_attn.data.naflex.NaFlexCollate`)."""
    ops: list[A.BasicTransform] = [A.HorizontalFlip(p=hflip)] if hflip > 0 else []
    if color_jitter > 0:
        ops.append(_color_jitter(color_jitter))
    ops += [A.Normalize(mean=tuple(mean), std=tuple(std), max_pixel_value=255.0), ToTensorV2()]
    return A.Compose(ops, strict=True)
