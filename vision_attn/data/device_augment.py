"""The training pipeline's pixel augmentations on a whole uint8 batch, where the batch is (the GPU):
colour jitter, RandAugment and random erasing of :func:`~vision_attn.data.transforms.train_transforms`,
then the normalisation.

With ``data.augment: device`` the loader workers only decode, cut the random resized crop and flip
(the steps that need the file or change the image's size); the classification data module then runs
:class:`DeviceAugment` on each training batch once it is on the training device. Each image draws
its own parameters, from the same distributions as the albumentations steps it replaces, and gets the
same operations in the same order:

- colour jitter with probability 0.8: brightness, contrast and saturation factors in
  ``[1 - s, 1 + s]``, applied in a random order (albumentations' ``ColorJitter``, hue 0);
- ``n`` RandAugment operations of :func:`~vision_attn.data.transforms.rand_augment_ops` chosen
  without replacement and applied in the list's order (albumentations' ``SomeOf`` sorts its draws):
  rotate, shear x / y, translate x / y (about the centre, zeros outside), equalize, autocontrast,
  posterize, solarize, sharpen, brightness-contrast, at the same magnitude. The geometric operations
  come first in that list, so an image's one or two are composed into one affine map and resampled
  once (``grid_sample``, the same bicubic kernel as OpenCV's, a = -0.75);
- random erasing with probability ``p``: one rectangle of 2-33% of the image, drawn as
  albumentations' ``Erasing`` draws it, filled with uniform random values 0..255.

Values are rounded to 0..255 after every operation, as the uint8 steps round. The parameters come
from a CPU generator seeded with ``seed``, so a batch gets the same augmentation on any device; the
erasing noise from a generator on the batch's device, seeded from the same draws. The data module
seeds each training batch from (seed, process rank, epoch, batch): a resumed run augments as the
uninterrupted one.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F

from vision_attn.data.normalize import PixelNormalize
from vision_attn.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from vision_attn.errors import ConfigError

__all__ = ["DeviceAugment", "AUGMENT_ON", "RAND_AUGMENT_OPS", "batch_seed"]

AUGMENT_ON = ("loader", "device")
"""Where the classification training pipeline's pixel augmentations run: in the loader workers
(albumentations, per image) or on the training device (:class:`DeviceAugment`, per batch)."""

RAND_AUGMENT_OPS = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y", "equalize", "autocontrast",
                    "posterize", "solarize", "sharpen", "brightness_contrast")
"""The operations of :func:`~vision_attn.data.transforms.rand_augment_ops`, in its order."""
_GEOMETRIC = 5  # the first five are affine maps
# train_transforms' interpolations -> grid_sample's modes (it has no area or Lanczos kernel: the
# nearest it has)
_MODES = {"nearest": "nearest", "bilinear": "bilinear", "bicubic": "bicubic", "area": "bilinear",
          "lanczos": "bicubic"}


def _grey(x: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) RGB -> (B, 1, H, W) luma in OpenCV's ``COLOR_RGB2GRAY`` fixed point (15 bits;
    exact in float32)."""
    return torch.div(x[:, 0:1] * 9798 + x[:, 1:2] * 19235 + x[:, 2:3] * 3735 + 16384, 32768, rounding_mode="floor")


def _uint8(x: torch.Tensor) -> torch.Tensor:
    """Rounded to the nearest of 0..255: OpenCV's saturating arithmetic (warps, filters, blends)."""
    return x.round_().clamp_(0, 255)


def _lut8(x: torch.Tensor) -> torch.Tensor:
    """Clipped to 0..255 and truncated: albumentations' look-up tables of ``x * a + b``."""
    return x.clamp_(0, 255).floor_()


def _per(values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(B,) per-image values -> (B, 1, 1, 1) on ``x``'s device and dtype."""
    return values.to(device=x.device, dtype=x.dtype).view(-1, 1, 1, 1)


def _cdf_stretch(x: torch.Tensor, *, autocontrast: bool = False) -> torch.Tensor:
    """Each channel of each image through its cumulative histogram stretched to 0..255 from its
    lowest level: OpenCV's ``equalizeHist`` (in float32), and with ``autocontrast`` albumentations'
    ``AutoContrast`` (method "cdf", float64), the same map over a histogram that leaves out level 255
    (its ``calcHist`` range ends there, exclusive); a single-level channel is unchanged. (B, 3, H, W)."""
    b, c, h, w = x.shape
    dtype = torch.float64 if autocontrast and x.device.type != "mps" else torch.float32
    levels = x.reshape(b * c, h * w).long()
    hist = torch.zeros(b * c, 256, dtype=dtype, device=x.device).scatter_add_(
        1, levels, torch.ones_like(levels, dtype=dtype))
    if autocontrast:
        hist[:, 255] = 0
    cdf = hist.cumsum(1)
    lowest = (hist > 0).to(torch.int8).argmax(1, keepdim=True)  # (B*3, 1)
    base = hist.gather(1, lowest)
    span = cdf[:, -1:] - base
    single = span == 0
    scale = (255 / torch.where(single, torch.ones_like(span), span)).to(dtype)
    lut = ((cdf - base) * scale).round_().clamp_(0, 255)
    lut = torch.where(torch.arange(256, device=x.device) < lowest, torch.zeros_like(lut), lut)
    lut = torch.where(single, torch.arange(256, device=x.device, dtype=dtype).expand_as(lut), lut)
    return lut.gather(1, levels).to(x.dtype).view(b, c, h, w)


class DeviceAugment:
    """Colour jitter, RandAugment, random erasing and normalisation of a (B, 3, H, W) uint8 batch
    (see the module); the arguments are those of :func:`~vision_attn.data.transforms.train_transforms`."""

    def __init__(self, *, color_jitter: float = 0.4, rand_augment: int = 0, rand_augment_magnitude: float = 9.0,
                 random_erasing: float = 0.0, interpolation: str = "bicubic",
                 mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD) -> None:
        if not 0 <= rand_augment <= len(RAND_AUGMENT_OPS):
            raise ConfigError(f"rand_augment={rand_augment}: give 0..{len(RAND_AUGMENT_OPS)} operations per image")
        if not 0 <= rand_augment_magnitude <= 10:
            raise ConfigError(f"rand_augment_magnitude={rand_augment_magnitude}: give a value between 0 and 10")
        if not 0 <= random_erasing <= 1:
            raise ConfigError(f"random_erasing={random_erasing}: give a probability between 0 and 1 (DeiT: 0.25)")
        if interpolation not in _MODES:
            raise ConfigError(f"interpolation={interpolation!r}: choose one of {', '.join(_MODES)}")
        self.color_jitter, self.n = float(color_jitter), int(rand_augment)
        self.m, self.erasing = rand_augment_magnitude / 10.0, float(random_erasing)
        self.mode = _MODES[interpolation]
        self.pixels = PixelNormalize(mean, std)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(color_jitter={self.color_jitter}, rand_augment={self.n}, "
                f"rand_augment_magnitude={self.m * 10:g}, random_erasing={self.erasing}, mode={self.mode!r})")

    def __call__(self, images: torch.Tensor, seed: int) -> torch.Tensor:
        """The augmented batch, normalised to float32 on its device."""
        return self.pixels.apply_(self.augment(images, seed))

    # ------------------------------------------------------------------ the pipeline
    def augment(self, images: torch.Tensor, seed: int) -> torch.Tensor:
        """(B, 3, H, W) uint8 -> the augmented batch as float32 holding 0..255 integers."""
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != 3:
            raise ConfigError(f"DeviceAugment takes a (B, 3, H, W) uint8 batch, got {images.dtype} "
                              f"{tuple(images.shape)}: set data.normalize: device with data.augment: device")
        g = torch.Generator().manual_seed(int(seed))
        x = images.float()
        b = x.shape[0]
        if self.color_jitter > 0:
            x = self.jitter(x, g)
        if self.n > 0:
            chosen = torch.rand(b, len(RAND_AUGMENT_OPS), generator=g).argsort(1)[:, :self.n].sort(1).values
            x = self.rand_augment(x, chosen, g)
        if self.erasing > 0:
            x = self.erase(x, g)
        return x

    def jitter(self, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        b, s = x.shape[0], self.color_jitter
        on = torch.rand(b, generator=g) < 0.8
        factors = torch.empty(b, 3).uniform_(max(0.0, 1 - s), 1 + s, generator=g)
        factors[~on] = 1.0  # a factor of 1 leaves the image as it is
        order = torch.rand(b, 3, generator=g).argsort(1)  # each image's order of the three
        for step in range(3):
            for op in range(3):
                f = torch.where(order[:, step] == op, factors[:, op], torch.ones(b))
                if bool((f == 1).all()):
                    continue
                f = _per(f, x)
                if op == 0:  # brightness: x * f
                    x = _lut8(x * f)
                elif op == 1:  # contrast: about the mean luma
                    mean = _grey(x).mean(dim=(2, 3), keepdim=True)
                    x = _lut8(x * f + mean * (1 - f))
                else:  # saturation: towards the luma
                    grey = _grey(x)
                    x = _uint8(x * f + grey * (1 - f))
        return x

    def rand_augment(self, x: torch.Tensor, chosen: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        """``chosen``: (B, n) sorted indices into :data:`RAND_AUGMENT_OPS`."""
        b, m = x.shape[0], self.m
        uniform = lambda lo, hi: torch.empty(b).uniform_(lo, hi, generator=g)  # noqa: E731
        angle, shear_x, shear_y = uniform(-30 * m, 30 * m), uniform(-17 * m, 17 * m), uniform(-17 * m, 17 * m)
        shift_x, shift_y = uniform(-0.45 * m, 0.45 * m), uniform(-0.45 * m, 0.45 * m)
        bits = torch.randint(max(1, 8 - round(4 * m)), 9, (b,), generator=g)
        threshold = uniform(1.0 - m, 1.0)
        alpha, lightness = uniform(0.0, 0.9 * m + 1e-3), uniform(0.5, 1.0)
        contrast, brightness = 1 + uniform(-0.9 * m, 0.9 * m), uniform(-0.9 * m, 0.9 * m) * 255
        geometric = chosen < _GEOMETRIC
        if bool(geometric.any()):
            x = self.warp(x, chosen, geometric, (angle, shear_x, shear_y, shift_x, shift_y))
        for slot in range(chosen.shape[1]):
            for op in range(_GEOMETRIC, len(RAND_AUGMENT_OPS)):
                rows = (chosen[:, slot] == op).nonzero().flatten()
                if not len(rows):
                    continue
                idx = rows.to(x.device)
                y = x.index_select(0, idx)
                name = RAND_AUGMENT_OPS[op]
                if name in ("equalize", "autocontrast"):
                    y = _cdf_stretch(y, autocontrast=name == "autocontrast")
                elif name == "posterize":
                    step = _per(2.0 ** (8 - bits[rows]), y)
                    y = torch.div(y, step, rounding_mode="floor") * step
                elif name == "solarize":
                    t = _per(threshold[rows] * 255, y)
                    y = torch.where(y >= t, 255 - y, y)
                elif name == "sharpen":
                    y = self.sharpen(y, alpha[rows], lightness[rows])
                else:  # brightness_contrast: x * alpha + beta (albumentations' brightness_by_max)
                    y = _lut8(y * _per(contrast[rows], y) + _per(brightness[rows], y))
                x = x.index_copy(0, idx, y)
        return x

    def warp(self, x: torch.Tensor, chosen: torch.Tensor, geometric: torch.Tensor,
             params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Every image with a geometric operation resampled once through the composition of its
        one or two affine maps (A.Affine's: about the centre, zeros outside)."""
        b, _, h, w = x.shape
        angle, shear_x, shear_y, shift_x, shift_y = params
        forward = torch.eye(3, dtype=torch.float64).repeat(b, 1, 1)  # (B, 3, 3) in pixels about the centre
        for slot in range(chosen.shape[1]):
            step = torch.eye(3, dtype=torch.float64).repeat(b, 1, 1)
            op = chosen[:, slot]
            a = -torch.deg2rad(angle.double())  # A.Affine turns the other way (the draws are symmetric)
            rot = op == 0
            step[rot, 0, 0], step[rot, 0, 1] = torch.cos(a[rot]), -torch.sin(a[rot])
            step[rot, 1, 0], step[rot, 1, 1] = torch.sin(a[rot]), torch.cos(a[rot])
            sx, sy = op == 1, op == 2
            step[sx, 0, 1] = -torch.tan(torch.deg2rad(shear_x.double()[sx]))
            step[sy, 1, 0] = -torch.tan(torch.deg2rad(shear_y.double()[sy]))
            tx, ty = op == 3, op == 4  # whole pixels, truncated as A.Affine does
            step[tx, 0, 2] = torch.trunc(shift_x.double()[tx] * w)
            step[ty, 1, 2] = torch.trunc(shift_y.double()[ty] * h)
            forward = step @ forward
        rows = geometric.any(1).nonzero().flatten()
        # output pixel -> source pixel, about the centre: (R, 2, 3), inverted in float64 on the CPU, the
        # grid itself made on the batch's device (it is as large as the images)
        inverse = torch.linalg.inv(forward[rows])[:, :2].to(device=x.device, dtype=x.dtype)
        cx, cy = (w - 1) / 2, (h - 1) / 2
        xs = (torch.arange(w, device=x.device, dtype=x.dtype) - cx).view(1, 1, w)
        ys = (torch.arange(h, device=x.device, dtype=x.dtype) - cy).view(1, h, 1)
        a = inverse.reshape(-1, 6, 1, 1).unbind(1)
        source_x = a[0] * xs + a[1] * ys + a[2]  # (R, H, W)
        source_y = a[3] * xs + a[4] * ys + a[5]
        # pixel centres -> grid_sample's [-1, 1] (align_corners=False)
        grid = torch.stack([(source_x + (cx + 0.5)) * (2 / w) - 1, (source_y + (cy + 0.5)) * (2 / h) - 1], -1)
        idx = rows.to(x.device)
        y = F.grid_sample(x.index_select(0, idx), grid, mode=self.mode, padding_mode="zeros", align_corners=False)
        return x.index_copy(0, idx, _uint8(y))

    @staticmethod
    def sharpen(x: torch.Tensor, alpha: torch.Tensor, lightness: torch.Tensor) -> torch.Tensor:
        """albumentations' ``Sharpen`` (method "kernel"): the blend ``(1 - alpha) identity + alpha
        [[-1, -1, -1], [-1, 8 + lightness, -1], [-1, -1, -1]]``, reflected border (OpenCV's default)."""
        r, c, h, w = x.shape
        kernel = torch.full((r, 3, 3), -1.0, dtype=torch.float64) * alpha.double().view(-1, 1, 1)
        kernel[:, 1, 1] = (1 - alpha.double()) + alpha.double() * (8 + lightness.double())
        kernel = kernel.to(device=x.device, dtype=x.dtype).repeat_interleave(c, 0).unsqueeze(1)  # (R*3, 1, 3, 3)
        padded = F.pad(x.reshape(1, r * c, h, w), (1, 1, 1, 1), mode="reflect")
        return _uint8(F.conv2d(padded, kernel, groups=r * c).view(r, c, h, w))

    def erase(self, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        """One rectangle per chosen image, drawn as albumentations' ``Erasing(scale=(0.02, 1/3),
        ratio=(0.3, 3.3))`` draws it, filled with uniform 0..255."""
        b, _, h, w = x.shape
        on = torch.rand(b, generator=g) < self.erasing
        area_total = h * w
        lo_area = area_total * 0.02
        hi_area = min(area_total / 3, min(0.3 * h * h, 3.3 * h * h), min(w * w / 0.3, w * w / 3.3))
        area = lo_area + torch.rand(b, generator=g, dtype=torch.float64) * (hi_area - lo_area)
        r_hi = torch.clamp(w * w / area, max=3.3)
        r_lo = torch.clamp(area / (h * h), min=0.3)
        ratio = r_lo + torch.rand(b, generator=g, dtype=torch.float64) * (r_hi - r_lo)
        eh = torch.sqrt(area / ratio).round().long().clamp(1, h)
        ew = torch.sqrt(area * ratio).round().long().clamp(1, w)
        top = (torch.rand(b, generator=g, dtype=torch.float64) * (h - eh + 1)).floor().long()
        left = (torch.rand(b, generator=g, dtype=torch.float64) * (w - ew + 1)).floor().long()
        noise_seed = int(torch.randint(0, 2**62, (1,), generator=g))
        if hi_area < lo_area or not bool(on.any()):
            return x
        dev = x.device
        ys, xs = torch.arange(h, device=dev).view(1, h, 1), torch.arange(w, device=dev).view(1, 1, w)
        top, left, eh, ew = (t.to(dev).view(-1, 1, 1) for t in (top, left, eh, ew))
        mask = (ys >= top) & (ys < top + eh) & (xs >= left) & (xs < left + ew) & on.to(dev).view(-1, 1, 1)
        noise = torch.randint(0, 256, x.shape, generator=torch.Generator(dev).manual_seed(noise_seed), device=dev)
        return torch.where(mask.unsqueeze(1), noise.to(x.dtype), x)


def batch_seed(seed: int, rank: int, epoch: int, batch: int) -> int:
    """The seed of one training batch's augmentation: a function of (seed, rank, epoch, batch) only."""
    mixed = 0
    for part in (seed, rank, epoch, batch):
        mixed = (mixed * 6364136223846793005 + int(part) + 1442695040888963407) % (1 << 63)
    return mixed
