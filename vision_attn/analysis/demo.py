"""What ``vision-attn demo`` computes: one real forward pass of a ViT on a photo shipped with
scikit-learn, its time per image, and the class token's attention entropy in each layer."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torchvision.transforms.v2.functional as TF
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from torch import nn

from vision_attn.analysis.attention import attention_entropy, uniform_entropy
from vision_attn.errors import DataError
from vision_attn.layers import record_attention, to_2tuple

__all__ = ["ForwardRun", "sample_photo", "seconds_per_image", "attention_forward"]


def sample_photo(size: int | tuple[int, int] = 224, name: str = "china.jpg") -> torch.Tensor:
    """A photo shipped by scikit-learn (``"china.jpg"`` or ``"flower.jpg"``, 427x640), resized to
    cover ``size`` (H, W), centre-cropped to it and normalised with the ImageNet mean and std.
    Returns (1, 3, H, W) float32."""
    from sklearn.datasets import load_sample_image  # imported here: scikit-learn is slow to import

    try:
        image = load_sample_image(name)  # (427, 640, 3) uint8
    except (AttributeError, ValueError) as e:  # scikit-learn's ways of saying "no such image"
        raise DataError(f"scikit-learn ships no sample image {name!r}: use 'china.jpg' or 'flower.jpg'") from e
    h, w = to_2tuple(size)
    x = torch.from_numpy(image.copy()).permute(2, 0, 1)  # (3, H0, W0) uint8; the array is read-only
    scale = max(h / x.shape[1], w / x.shape[2])
    x = TF.resize(x, [round(x.shape[1] * scale), round(x.shape[2] * scale)], antialias=True)
    x = TF.center_crop(x, [h, w]).float().div_(255)
    x = TF.normalize(x, list(IMAGENET_DEFAULT_MEAN), list(IMAGENET_DEFAULT_STD))
    return x[None]  # (1, 3, h, w)


def seconds_per_image(model: nn.Module, x: torch.Tensor, repeats: int = 5, warmup: int = 2) -> float:
    """Median wall time of ``model(x)`` in inference mode after ``warmup`` calls, divided by the
    batch. A rough figure; ``vision-attn benchmark`` is the measurement."""
    with torch.inference_mode():
        for _ in range(warmup):
            model(x)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - t0)
    return statistics.median(times) / x.shape[0]


@dataclass(frozen=True)
class ForwardRun:
    """One forward pass: shapes, time per image and the class token's attention entropy.

    ``cls_entropy``: per layer, the entropy (nats) of the class token's attention averaged over the
    heads; ``max_entropy``: ``log N`` for the N tokens (uniform attention).
    """

    input_shape: tuple[int, ...]
    grid: tuple[int, int]
    tokens_shape: tuple[int, ...]
    logits_shape: tuple[int, ...]
    seconds_per_image: float
    cls_entropy: list[float]
    max_entropy: float


def attention_forward(model: nn.Module, x: torch.Tensor, repeats: int = 5) -> ForwardRun:
    """Run a ViT-like ``model`` (``forward_features``, ``forward_head``, ``patch_embed``) on images
    (B, C, H, W) in eval mode: time the fused path, then one pass with the attention weights recorded."""
    model.eval()
    seconds = seconds_per_image(model, x, repeats)
    with torch.inference_mode(), record_attention(model) as maps:
        tokens = model.forward_features(x)  # (B, prefix + h*w, D)
        logits = model.forward_head(tokens)  # (B, classes)
    ph, pw = model.patch_embed.patch_size
    grid = (-(-x.shape[-2] // ph), -(-x.shape[-1] // pw))
    entropy = [attention_entropy(w).mean().item() for w in maps]
    return ForwardRun(tuple(x.shape), grid, tuple(tokens.shape), tuple(logits.shape), seconds, entropy,
                      uniform_entropy(tokens.shape[1]))
