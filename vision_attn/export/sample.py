"""A real photo as a network input, for checking an exported graph on something other than noise:
scikit-learn's ``china.jpg`` (427x640), prepared the way the network expects its images."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

__all__ = ["photo_tensor", "classifier_input", "letterbox_input"]

PAD_VALUE = 114 / 255  # grey border of a letterboxed detector input, as in YOLO


def photo_tensor(name: str = "china.jpg") -> torch.Tensor:
    """The photo as (3, H0, W0) float32 in [0, 1]."""
    from sklearn.datasets import load_sample_image  # slow to import: only when a photo is asked for

    return torch.from_numpy(load_sample_image(name).copy()).permute(2, 0, 1).float().div_(255)


def classifier_input(size: tuple[int, int], mean: Sequence[float], std: Sequence[float],
                     name: str = "china.jpg") -> torch.Tensor:
    """Resized to cover ``size`` (H, W), centre-cropped and normalised: (1, 3, H, W)."""
    x = photo_tensor(name)
    h, w = size
    scale = max(h / x.shape[1], w / x.shape[2])
    rh, rw = max(h, round(x.shape[1] * scale)), max(w, round(x.shape[2] * scale))
    x = F.interpolate(x[None], size=(rh, rw), mode="bilinear", antialias=True, align_corners=False)
    top, left = (rh - h) // 2, (rw - w) // 2
    x = x[..., top:top + h, left:left + w]
    m = torch.tensor(mean, dtype=x.dtype).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=x.dtype).view(1, -1, 1, 1)
    return ((x - m) / s).contiguous()


def letterbox_input(size: tuple[int, int], name: str = "china.jpg") -> torch.Tensor:
    """Resized to fit inside ``size`` keeping its aspect, centred on a grey canvas: (1, 3, H, W) in [0, 1]."""
    x = photo_tensor(name)
    h, w = size
    scale = min(h / x.shape[1], w / x.shape[2])
    rh, rw = round(x.shape[1] * scale), round(x.shape[2] * scale)
    x = F.interpolate(x[None], size=(rh, rw), mode="bilinear", antialias=True, align_corners=False)
    out = torch.full((1, 3, h, w), PAD_VALUE)
    top, left = (h - rh) // 2, (w - rw) // 2
    out[..., top:top + rh, left:left + rw] = x
    return out
