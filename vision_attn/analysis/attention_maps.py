"""Where a model attends on one image, as 2-D maps to overlay on it.

- ViT/DeiT: attention rollout (Abnar & Zuidema, 2020): per layer the heads' mean attention plus the
  identity for the residual path, rows renormalised, multiplied from the first layer to the last;
  the class token's row over the patches is the map. Also the last layer's class-token attention
  per head. Weights come from :func:`vision_attn.layers.record_attention`. The prefix tokens (the
  class token, DeiT's distillation token, the registers of DINOv2 ``*_reg4`` and DINOv3) are never
  folded into the grid: their shares of the same rows are kept apart, token by token
  (:class:`TokenShares`), beside the patch grid's total; a model without a class token is read from
  the mean of its patch tokens' rows, and so is, when the maps should explain the head
  (``head_query``: ``vision-attn explain``), one whose head averages the patches.
  The heads can be fused by their maximum or minimum instead of the mean, and each layer's weakest
  weights discarded (``head_fusion``, ``discard``: the options of Gildenblat's vit-explain).
- Swin: for the first (unshifted) block of each stage, the attention each token receives inside its
  window (mean over heads and queries), put back in place on the stage's feature map; each window's
  values sum to 1.
- CNNs with CBAM: each spatial-attention gate (B, 1, H, W), captured with forward hooks.
- YOLO detectors with attention blocks (YOLO12's area attention, YOLOv10's PSA, YOLO11/26's C2PSA,
  an inserted AreaAttention row): for each attention module, the attention each position receives
  (mean over heads and queries) on the module's feature map; within an area-attention strip the
  values sum to 1, as over a whole PSA map.

Maps are float tensors in the model's feature resolution; :func:`render_maps` upsamples and overlays
them on the image.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import ConfigError, DataError
from vision_attn.io.atomic import save_figure
from vision_attn.layers import record_attention
from vision_attn.layers.swin_block import SwinBlock
from vision_attn.models.yolo.area_attention import AAttn
from vision_attn.models.yolo.psa import Attention as PSAAttention

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["AttentionMaps", "TokenShares", "attention_maps", "attention_rollout", "cbam_maps", "prefix_tokens",
           "prepare_image", "render_maps", "maps_figure", "swin_window_maps", "vit_maps", "detector_maps"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass
class TokenShares:
    """Where a ViT's ``query`` (the class token, or the mean of the patch tokens' rows without one) puts its
    attention: on each prefix token of ``tokens`` apart (``class``, ``distillation``, ``register i``, in
    sequence order) and on the patch grid as a whole. ``rows`` maps a row's name to its shares
    (len(columns),) in the order of :attr:`columns`, summing to 1: ``rollout`` and ``last layer, head h``
    (the rows whose patch part the maps of the same names show) and ``layer i`` (that layer's mean over
    heads)."""

    query: str
    tokens: list[str]
    rows: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def columns(self) -> list[str]:
        """The prefix tokens, then ``patches`` (the grid's total)."""
        return [*self.tokens, "patches"]

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "columns": self.columns,
                "rows": {name: [float(v) for v in row] for name, row in self.rows.items()}}


@dataclass
class AttentionMaps:
    """``kind`` (``"vit"``, ``"swin"``, ``"cbam"`` or ``"yolo"``) and named 2-D maps (h, w), in display order;
    for a ViT, ``shares``: the same attention split between the prefix tokens and the patch grid."""

    kind: str
    maps: dict[str, torch.Tensor] = field(default_factory=dict)
    shares: TokenShares | None = None

    def to_dict(self) -> dict[str, Any]:
        """The maps (shape and values, row by row) and the shares, as JSON data."""
        out: dict[str, Any] = {"kind": self.kind, "maps": {
            name: {"shape": list(m.shape), "values": m.float().tolist()} for name, m in self.maps.items()}}
        if self.shares is not None:
            out["shares"] = self.shares.to_dict()
        return out


HEAD_FUSIONS = ("mean", "max", "min")
"""How :func:`attention_rollout` fuses a layer's heads."""


def attention_rollout(weights: Sequence[torch.Tensor], residual: bool = True, head_fusion: str = "mean",
                      discard: float = 0.0) -> torch.Tensor:
    """Rollout of per-layer attention weights, each (B, heads, N, N) -> (B, N, N).

    Heads are fused by ``head_fusion`` (``mean``, Abnar & Zuidema's; ``max`` or ``min``, elementwise over
    the heads); ``discard`` in [0, 1) zeroes that share of each image's lowest fused weights per layer
    (before the identity is added); with ``residual`` the identity is added (``0.5 A + 0.5 I``, the skip
    path) and rows renormalised to sum to 1; the layers are multiplied in order (``A_L ... A_1``). Row i
    is how much each input token contributes to token i at the output; every row sums to 1 (with
    ``residual``, or while no row is discarded whole).
    """
    if not weights:
        raise DataError("attention_rollout: no attention weights were recorded")
    if head_fusion not in HEAD_FUSIONS:
        raise ConfigError(f"head_fusion={head_fusion!r}: choose one of {', '.join(HEAD_FUSIONS)}")
    if not 0.0 <= discard < 1.0:
        raise ConfigError(f"discard={discard}: the share of weights to discard must be in [0, 1)")
    result = None
    for w in weights:
        if w.ndim != 4 or w.shape[-1] != w.shape[-2]:
            raise DataError(f"attention_rollout: expected (batch, heads, N, N) weights, got {tuple(w.shape)}")
        w = w.float()
        a = w.mean(dim=1) if head_fusion == "mean" else w.amax(dim=1) if head_fusion == "max" else w.amin(dim=1)
        if discard:
            flat = a.reshape(a.shape[0], -1)
            lowest = flat.topk(int(flat.shape[-1] * discard), dim=-1, largest=False).indices
            a = flat.scatter(-1, lowest, 0.0).reshape(a.shape)
        if residual:
            a = 0.5 * a + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
        a = a / a.sum(dim=-1, keepdim=True)
        result = a if result is None else a @ result
    return result


def _grid(model: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    ph, pw = model.patch_embed.patch_size
    return -(-x.shape[-2] // ph), -(-x.shape[-1] // pw)


def prefix_tokens(model: nn.Module) -> list[str]:
    """The names of a ViT's tokens before the patches, in sequence order: ``class``, ``distillation``
    (DeiT), ``register 0`` ... (``prefix i`` where the model's attributes do not tell them apart)."""
    n = int(getattr(model, "num_prefix_tokens", 1))
    names = [label for label, attr in (("class", "cls_token"), ("distillation", "dist_token"))
             if getattr(model, attr, None) is not None]
    registers = getattr(model, "reg_token", None)
    names += [f"register {i}" for i in range(0 if registers is None else registers.shape[1])]
    return names if len(names) == n else [f"prefix {i}" for i in range(n)]


def vit_maps(model: nn.Module, x: torch.Tensor, head_fusion: str = "mean", discard: float = 0.0,
             head_query: bool = False) -> AttentionMaps:
    """Rollout (:func:`attention_rollout` with ``head_fusion`` and ``discard``) and the last layer's class-token
    attention per head of a ViT/DeiT on images (1, C, H, W), and the shares of those rows (and of each layer's
    mean over heads) on every prefix token (:class:`TokenShares`). The query is the class token, else the
    mean of the patch tokens' rows; with ``head_query``, the token the head reads (the patches' mean row
    when the head averages the patches, though the model has a class token)."""
    model.eval()
    with torch.inference_mode(), record_attention(model) as weights:
        model(x)
    tokens = prefix_tokens(model)
    prefix = len(tokens)
    has_class = tokens[:1] == ["class"] and not (head_query and getattr(model, "global_pool", "token") == "avg")
    gh, gw = _grid(model, x)

    def query(a: torch.Tensor) -> torch.Tensor:  # (..., N, N) -> the query's row (..., N)
        return a[..., 0, :] if has_class else a[..., prefix:, :].mean(dim=-2)

    def split(row: torch.Tensor) -> torch.Tensor:  # (N,) -> each prefix token, then the patches' total
        return torch.cat([row[:prefix], row[prefix:].sum(dim=0, keepdim=True)])

    rollout = query(attention_rollout(weights, head_fusion=head_fusion, discard=discard)[0])  # (N,)
    last = query(weights[-1][0].float())  # (heads, N)
    out = AttentionMaps("vit", {"rollout": rollout[prefix:].reshape(gh, gw)},
                        TokenShares("class token" if has_class else "mean of the patch tokens", tokens))
    out.shares.rows["rollout"] = split(rollout)
    for h in range(last.shape[0]):
        out.maps[f"last layer, head {h}"] = last[h, prefix:].reshape(gh, gw)
        out.shares.rows[f"last layer, head {h}"] = split(last[h])
    for i, w in enumerate(weights):
        out.shares.rows[f"layer {i}"] = split(query(w[0].float().mean(dim=0)))
    return out


def _recorded_calls(model: nn.Module, x: torch.Tensor, modules: Sequence[tuple[str, nn.Module]],
                    keep: Callable[[nn.Module], Any]) -> list[tuple[str, tuple[int, ...], Any]]:
    """Run ``model`` on ``x`` in eval mode under :func:`record_attention`; for each call of one of
    ``modules`` (name, module): its name, its input's shape and ``keep(module)`` read as it returns."""
    captured: list[tuple[str, tuple[int, ...], Any]] = []

    def hook(name):
        return lambda mod, inp, _out: captured.append((name, tuple(inp[0].shape), keep(mod)))

    handles = [m.register_forward_hook(hook(n)) for n, m in modules]
    model.eval()
    try:
        with torch.inference_mode(), record_attention(model):
            model(x)
    finally:
        for h in handles:
            h.remove()
    return captured


def swin_window_maps(model: nn.Module, x: torch.Tensor) -> AttentionMaps:
    """Attention received per token within its window, first (unshifted) block of each stage."""
    blocks = [(n, m) for n, m in model.named_modules() if isinstance(m, SwinBlock) and not any(m.shift_size)]
    firsts, seen = [], set()
    for name, block in blocks:  # the first unshifted block of each stage
        stage = name.rsplit(".blocks.", 1)[0]
        if stage not in seen:
            seen.add(stage)
            firsts.append((name, block))
    out = AttentionMaps("swin")
    for name, (B, H, W, _C), (w, block) in _recorded_calls(model, x, firsts, lambda m: (m.attn.weights, m)):
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


def _detector_attention(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, (AAttn, PSAAttention))]


def detector_maps(model: nn.Module, x: torch.Tensor) -> AttentionMaps:
    """Attention received per position for every area-attention and PSA module of a YOLO detector."""
    out = AttentionMaps("yolo")
    def keep(m: nn.Module) -> tuple[torch.Tensor, int]:
        return m.weights, getattr(m, "area", 1)

    for name, (B, _C, H, W), (w, area) in _recorded_calls(model, x, _detector_attention(model), keep):
        received = w.float().mean(dim=1).mean(dim=1)  # (B * area, N / area): mean over heads, then queries
        where = f", area {area}" if area > 1 else ""
        out.maps[f"{name} ({H}x{W}{where})"] = received.reshape(B, H, W)[0]
    return out


def attention_maps(model: nn.Module, x: torch.Tensor) -> AttentionMaps:
    """The maps this model has: Swin window attention, ViT rollout and heads, a YOLO detector's area
    attention and PSA blocks, or CBAM spatial gates."""
    mods = list(model.modules())
    if any(isinstance(m, SwinBlock) for m in mods):
        return swin_window_maps(model, x)
    if hasattr(model, "patch_embed") and any(hasattr(m, "keep_weights") for m in mods):
        return vit_maps(model, x)
    if _detector_attention(model):
        return detector_maps(model, x)
    if any(type(m).__name__.endswith("SpatialAttention") for m in mods):
        return cbam_maps(model, x)
    raise ConfigError(f"{type(model).__name__} has no attention to show: attn-map takes ViT/DeiT, Swin, a CNN "
                      "with CBAM (e.g. --model resnet50 --attention cbam), or a detector YAML with attention blocks "
                      "(e.g. --model configs/models/yolo12.yaml)")


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


PANEL_TITLE_CHARS = 22
"""A panel's title is wrapped at this many characters (on spaces and dots), so that titles of neighbouring
panels never run into each other."""


def _wrap_title(name: str, width: int = PANEL_TITLE_CHARS) -> str:
    """``layers.0.blocks.0 (56x56, window 7x7)`` -> lines of at most ``width`` characters, broken after
    a space or a dot (a single longer word is cut)."""
    lines, line = [], ""
    for piece in re.findall(r"[^ .]+[ .]?|[ .]", name):
        if len(line) + len(piece.rstrip()) > width and line:
            lines.append(line.rstrip())
            line = ""
        while len(piece.rstrip()) > width:
            lines.append(piece[:width])
            piece = piece[width:]
        line += piece
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(lines)


SHARES_TITLE = "{query}'s attention, each prefix token apart from the patch grid"
"""The title of the shares panel (:func:`maps_figure`)."""


def _evenly(items: list, n: int) -> list:
    """At most ``n`` of ``items``, evenly spaced, first and last included (shallow to deep)."""
    if len(items) <= n:
        return items
    return [items[round(i * (len(items) - 1) / max(n - 1, 1))] for i in range(n)]


SHARES_LAYER_ROWS = 12
"""The shares panel draws at most this many of the per-layer rows (evenly spaced); the JSON has them all."""


def _shares_panel(ax: Any, shares: TokenShares, names: list[str]) -> None:
    """One stacked horizontal bar per row ``names`` of ``shares``: each prefix token's share, then the
    patches' (grey), the values written on the segments of 0.06 or more; the legend names the columns."""
    from matplotlib import colormaps

    values = np.stack([shares.rows[n].numpy() for n in names])  # (rows, columns)
    registers = sum(t.startswith("register") for t in shares.tokens)
    fixed = {"class": "tab:blue", "distillation": "tab:purple", "patches": "0.75"}
    left = np.zeros(len(names))
    for j, column in enumerate(shares.columns):
        if column in fixed:
            colour = fixed[column]
        elif column.startswith("register"):  # oranges, light to dark
            colour = colormaps["Oranges"](0.35 + 0.5 * int(column.split()[-1]) / max(registers - 1, 1))
        else:
            colour = colormaps["Greens"](0.4 + 0.4 * j / max(len(shares.columns) - 1, 1))
        ax.barh(np.arange(len(names)), values[:, j], left=left, height=0.8, color=colour, label=column)
        for i, v in enumerate(values[:, j]):
            if v >= 0.06:
                ax.text(left[i] + v / 2, i, f"{v:.2f}", ha="center", va="center", fontsize=6)
        left += values[:, j]
    ax.set_yticks(np.arange(len(names)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(SHARES_TITLE.format(query=shares.query), fontsize=8)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)


def maps_figure(image: np.ndarray, maps: AttentionMaps, title: str = "", max_panels: int = 8) -> "Figure":
    """The image and up to ``max_panels`` maps (evenly spaced when there are more), each upsampled
    (bilinear), scaled to [0, 1] and overlaid; panel titles wrapped (:data:`PANEL_TITLE_CHARS`) and
    the layout constrained, so no two titles overlap. A ViT with prefix tokens (class, distillation,
    registers) gets a panel below, across the figure: the rows of ``maps.shares`` of the maps drawn and of
    up to :data:`SHARES_LAYER_ROWS` layers, each a stacked bar."""
    from matplotlib.figure import Figure

    items = _evenly(list(maps.maps.items()), max_panels)
    titles = [_wrap_title(name) for name, _ in items]
    lines = max([t.count("\n") + 1 for t in titles] + [1])
    shares = maps.shares if maps.shares is not None and maps.shares.tokens else None
    bars: list[str] = []
    if shares is not None:  # the maps drawn, then the layers' rows
        bars = [name for name, _ in items if name in shares.rows]
        bars += _evenly([name for name in shares.rows if name not in maps.maps], SHARES_LAYER_ROWS)
    cols = max(min(len(items) + 1, 5), 2 if shares else 1)
    rows = -(-(len(items) + 1) // cols)
    heights = [2.4 + 0.16 * lines] * rows + ([0.7 + 0.2 * len(bars)] if shares else [])
    fig = Figure(figsize=(2.4 * cols, sum(heights) + (0.3 if title else 0.0)), layout="constrained")
    grid = fig.add_gridspec(len(heights), cols, height_ratios=heights)
    ax = fig.add_subplot(grid[0, 0])
    ax.imshow(image)
    ax.set_title("input", fontsize=8)
    ax.axis("off")
    h, w = image.shape[:2]
    for i, ((name, m), text) in enumerate(zip(items, titles), start=1):
        up = F.interpolate(m[None, None].float(), size=(h, w), mode="bilinear", align_corners=False)[0, 0]
        up = (up - up.min()) / (up.max() - up.min()).clamp_min(1e-12)
        ax = fig.add_subplot(grid[i // cols, i % cols])
        ax.imshow(image)
        ax.imshow(up.numpy(), cmap="jet", alpha=0.5)
        ax.set_title(text, fontsize=8)
        ax.axis("off")
    if shares is not None:
        _shares_panel(fig.add_subplot(grid[rows, :]), shares, bars)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def render_maps(image: np.ndarray, maps: AttentionMaps, path: str | os.PathLike, title: str = "",
                max_panels: int = 8) -> Path:
    """:func:`maps_figure` written to ``path`` as a PNG."""
    return save_figure(maps_figure(image, maps, title, max_panels), path, dpi=72)
