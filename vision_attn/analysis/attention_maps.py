"""Where a model attends on one image, as 2-D maps to overlay on it.

- ViT/DeiT: attention rollout (Abnar & Zuidema, 2020): per layer the heads' mean attention plus the
  identity for the residual path, rows renormalised, multiplied from the first layer to the last;
  the class token's row over the patches is the map. Also the last layer's class-token attention
  per head. Weights come from :func:`vision_attn.layers.record_attention`.
- Swin: for the first (unshifted) block of each stage, the attention each token receives inside its
  window (mean over heads and queries), put back in place on the stage's feature map; each window's
  values sum to 1.
- CNNs with CBAM: each spatial-attention gate (B, 1, H, W), captured with forward hooks.

Maps are float tensors in the model's feature resolution; :func:`render_maps` upsamples and overlays
them on the image.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import ConfigError, DataError
from vision_attn.io.atomic import save_figure
from vision_attn.layers import record_attention
from vision_attn.layers.swin_block import SwinBlock

__all__ = ["AttentionMaps", "attention_maps", "attention_rollout", "cbam_maps", "prepare_image", "render_maps",
           "swin_window_maps", "vit_maps"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass
class AttentionMaps:
    """``kind`` (``"vit"``, ``"swin"`` or ``"cbam"``) and named 2-D maps (h, w), in display order."""

    kind: str
    maps: dict[str, torch.Tensor] = field(default_factory=dict)


def attention_rollout(weights: Sequence[torch.Tensor], residual: bool = True) -> torch.Tensor:
    """Rollout of per-layer attention weights, each (B, heads, N, N) -> (B, N, N).

    Heads are averaged; with ``residual`` the identity is added (``0.5 A + 0.5 I``, the skip path)
    and rows renormalised to sum to 1; the layers are multiplied in order (``A_L ... A_1``). Row i
    is how much each input token contributes to token i at the output; every row sums to 1.
    """
    if not weights:
        raise DataError("attention_rollout: no attention weights were recorded")
    result = None
    for w in weights:
        if w.ndim != 4 or w.shape[-1] != w.shape[-2]:
            raise DataError(f"attention_rollout: expected (batch, heads, N, N) weights, got {tuple(w.shape)}")
        a = w.float().mean(dim=1)  # (B, N, N)
        if residual:
            a = 0.5 * a + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
        a = a / a.sum(dim=-1, keepdim=True)
        result = a if result is None else a @ result
    return result


def _grid(model: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    ph, pw = model.patch_embed.patch_size
    return -(-x.shape[-2] // ph), -(-x.shape[-1] // pw)


def vit_maps(model: nn.Module, x: torch.Tensor) -> AttentionMaps:
    """Rollout and the last layer's class-token attention per head of a ViT/DeiT on images (1, C, H, W)."""
    model.eval()
    with torch.inference_mode(), record_attention(model) as weights:
        model(x)
    prefix = int(getattr(model, "num_prefix_tokens", 1))
    gh, gw = _grid(model, x)
    rollout = attention_rollout(weights)[0, 0, prefix:]  # class token's row over the patches
    out = AttentionMaps("vit", {"rollout": rollout.reshape(gh, gw)})
    last = weights[-1][0, :, 0, prefix:].float()  # (heads, patches)
    for h in range(last.shape[0]):
        out.maps[f"last layer, head {h}"] = last[h].reshape(gh, gw)
    return out


def swin_window_maps(model: nn.Module, x: torch.Tensor) -> AttentionMaps:
    """Attention received per token within its window, first (unshifted) block of each stage."""
    blocks = [(n, m) for n, m in model.named_modules() if isinstance(m, SwinBlock) and not any(m.shift_size)]
    captured: list[tuple[str, tuple[int, ...], torch.Tensor, SwinBlock]] = []

    def hook(name):
        return lambda mod, inp, _out: captured.append((name, tuple(inp[0].shape), mod.attn.weights, mod))

    firsts, seen = [], set()
    for name, block in blocks:  # the first unshifted block of each stage
        stage = name.rsplit(".blocks.", 1)[0]
        if stage not in seen:
            seen.add(stage)
            firsts.append((name, block))
    handles = [b.register_forward_hook(hook(n)) for n, b in firsts]
    model.eval()
    try:
        with torch.inference_mode(), record_attention(model):
            model(x)
    finally:
        for h in handles:
            h.remove()
    out = AttentionMaps("swin")
    for name, (B, H, W, _C), w, block in captured:
        window = block.window_size
        received = w.float().mean(dim=1).mean(dim=1)  # (B*nW, N): mean over heads, then over queries
        index, inverse = block.windows.index((H, W), window, (0, 0), block.rule.roll_before_pad, False, w.device)
        Hp, Wp = -(-H // window[0]) * window[0], -(-W // window[1]) * window[1]
        grid = received.reshape(B, -1).index_select(1, inverse).view(B, Hp, Wp)[:, :H, :W]
        out.maps[f"{name} ({H}x{W}, window {window[0]}x{window[1]})"] = grid[0]
    return out


def cbam_maps(model: nn.Module, x: torch.Tensor) -> AttentionMaps:
    """The spatial-attention gates (H, W) of every CBAM-like module (one with a ``SpatialAttention``
    part exposing ``attention``), captured with forward hooks."""
    spatial = [(n, m) for n, m in model.named_modules()
               if type(m).__name__.endswith("SpatialAttention") and hasattr(m, "attention")]
    out = AttentionMaps("cbam")

    def hook(name):
        def fn(mod, inp, _out):
            out.maps[name] = mod.attention(inp[0])[0, 0].float()
        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in spatial]
    model.eval()
    try:
        with torch.inference_mode():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return out


def attention_maps(model: nn.Module, x: torch.Tensor) -> AttentionMaps:
    """The maps this model has: Swin window attention, ViT rollout and heads, or CBAM spatial gates."""
    mods = list(model.modules())
    if any(isinstance(m, SwinBlock) for m in mods):
        return swin_window_maps(model, x)
    if hasattr(model, "patch_embed") and any(hasattr(m, "keep_weights") for m in mods):
        return vit_maps(model, x)
    if any(type(m).__name__.endswith("SpatialAttention") for m in mods):
        return cbam_maps(model, x)
    raise ConfigError(f"{type(model).__name__} has no attention to show: attn-map takes ViT/DeiT, Swin, or a CNN "
                      "with CBAM (e.g. --model resnet50 --attention cbam)")


def prepare_image(image: np.ndarray, size: int | tuple[int, int], mean: Sequence[float] = IMAGENET_MEAN,
                  std: Sequence[float] = IMAGENET_STD) -> tuple[np.ndarray, torch.Tensor]:
    """An (H, W, 3) uint8 image resized to cover ``size``, centre-cropped: the crop (h, w, 3) uint8 for
    display and the normalised input (1, 3, h, w) float32."""
    import torchvision.transforms.v2.functional as TF

    h, w = (size, size) if isinstance(size, int) else size
    t = torch.from_numpy(np.array(image, dtype=np.uint8, copy=True)).permute(2, 0, 1)
    scale = max(h / t.shape[1], w / t.shape[2])
    t = TF.resize(t, [max(h, round(t.shape[1] * scale)), max(w, round(t.shape[2] * scale))], antialias=True)
    t = TF.center_crop(t, [h, w])
    shown = t.permute(1, 2, 0).numpy().copy()
    x = TF.normalize(t.float().div(255), list(mean), list(std))
    return shown, x[None]


def render_maps(image: np.ndarray, maps: AttentionMaps, path: str | os.PathLike, title: str = "",
                max_panels: int = 8) -> Path:
    """The image and up to ``max_panels`` maps (evenly spaced when there are more), each upsampled
    (bilinear), scaled to [0, 1] and overlaid; a PNG."""
    from matplotlib.figure import Figure


    items = list(maps.maps.items())
    if len(items) > max_panels:  # evenly spaced, first and last included: shallow to deep
        items = [items[round(i * (len(items) - 1) / max(max_panels - 1, 1))] for i in range(max_panels)]
    cols = min(len(items) + 1, 5)
    rows = -(-(len(items) + 1) // cols)
    fig = Figure(figsize=(2.4 * cols, 2.5 * rows))
    ax = fig.add_subplot(rows, cols, 1)
    ax.imshow(image)
    ax.set_title("input", fontsize=9)
    ax.axis("off")
    h, w = image.shape[:2]
    for i, (name, m) in enumerate(items, start=2):
        up = F.interpolate(m[None, None].float(), size=(h, w), mode="bilinear", align_corners=False)[0, 0]
        up = (up - up.min()) / (up.max() - up.min()).clamp_min(1e-12)
        ax = fig.add_subplot(rows, cols, i)
        ax.imshow(image)
        ax.imshow(up.numpy(), cmap="jet", alpha=0.5)
        ax.set_title(name, fontsize=8)
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path, dpi=72)
