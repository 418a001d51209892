"""Parameters, MACs and FLOPs of a model, counted by ``torch.utils.flop_counter``.

Conventions: a MAC is one multiply-accumulate, which is what papers (and fvcore, thop, ptflops) call
a "FLOP"; ``torch.utils.flop_counter`` counts 2 FLOPs per MAC. :class:`FlopReport` gives both.

torch 2.14's counter has no formula for the fused attention kernels that
``scaled_dot_product_attention`` runs on the CPU (``aten._scaled_dot_product_flash_attention_for_cpu``,
``aten._scaled_dot_product_fused_attention_overrideable``) nor for the fused multi-head attention of
``nn.MultiheadAttention`` in eval mode (``aten._native_multi_head_attention``), so it counts them as
zero: timm's ViT-S reads 4.24 instead of 4.60 GMACs. :data:`FUSED_ATTENTION_FORMULAS` adds those
formulas through ``FlopCounterMode(custom_mapping=...)``, without touching torch's global registry.

Counting on the ``meta`` device allocates nothing and runs no arithmetic, so the largest variants cost
milliseconds. There ``scaled_dot_product_attention`` would decompose into plain matrix products; the
count routes it to the CPU's fused kernel instead, so the meta count, and the figure a plain counter
would read (:attr:`FlopReport.macs_without_fused_attention`), equal those of a real CPU run. On meta
the operations' shapes come from :mod:`vision_attn.analysis.meta_shapes`, which keeps torch's Python
meta kernels and its counter's own dispatch mode (both import ``torch._dynamo``) out of the count.
"""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from vision_attn.analysis.meta_shapes import count_on_meta, meta_shapes
from vision_attn.errors import ConfigError
from vision_attn.kernels import FLOP_FORMULAS as KERNEL_FLOP_FORMULAS
from vision_attn.kernels import kernel_plan
from vision_attn.models import create_model

__all__ = [
    "FUSED_ATTENTION_FORMULAS",
    "SAMPLING_FORMULAS",
    "FlopReport",
    "count_flops",
    "count_model_flops",
    "default_input_size",
    "flop_counter",
    "module_tree",
]

aten = torch.ops.aten


# ------------------------------------------------------------------------------------------------
# Formulas. FlopCounterMode passes every tensor argument as its shape (torch.Size) and the output's
# shape(s) as ``out_shape``; each formula returns FLOPs (2 per MAC), as torch's own formulas do.
def _sdpa_cpu_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """Forward of the fused CPU/overrideable SDPA kernels: q kᵀ and attn v, (B, heads, N, d) inputs."""
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _sdpa_cpu_backward_flop(grad_out_shape, query_shape, key_shape, value_shape, *args,
                            out_shape=None, **kwargs) -> int:
    """Backward of the fused CPU/overrideable SDPA kernels (recomputed scores plus four products)."""
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _native_mha_flop(query_shape, key_shape, value_shape, embed_dim, num_head, *args,
                     out_shape=None, **kwargs) -> int:
    """``nn.MultiheadAttention``'s eval fast path: q, k, v projections, attention and the output
    projection, for (B, L, E) queries and (B, S, E) keys and values."""
    *lead_q, L, E = query_shape
    *_, S, _ = key_shape
    B = 1
    for n in lead_q:
        B *= n
    macs = B * L * E * E  # q projection
    macs += 2 * B * S * E * E  # k and v projections
    macs += 2 * B * L * S * E  # q kᵀ over all heads, then attn v
    macs += B * L * E * E  # output projection
    return 2 * macs


FUSED_ATTENTION_FORMULAS: dict[Any, Callable[..., int]] = {
    aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_flop,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_cpu_backward_flop,
    aten._scaled_dot_product_fused_attention_overrideable: _sdpa_cpu_flop,
    aten._scaled_dot_product_fused_attention_overrideable_backward: _sdpa_cpu_backward_flop,
    aten._native_multi_head_attention: _native_mha_flop,
}
"""``custom_mapping`` for ``FlopCounterMode``: FLOP formulas for the fused attention kernels that
torch 2.14's counter leaves at zero. Keys are op packets (``torch.ops.aten.<name>``)."""


# Bilinear sampling (F.grid_sample; the deformable attention's embedding_bag). Convention: a sampled
# value is a weighted sum of its neighbours, one MAC per neighbour and channel (bilinear: 4, bicubic:
# 16, nearest: a copy, 0); the neighbours' weights are computed once per sampling point for all
# channels and, like other element-wise work, not counted.
_GRID_SAMPLE_NEIGHBOURS = {0: 4, 1: 0, 2: 16}  # interpolation_mode: bilinear, nearest, bicubic


def _grid_sampler_2d_flop(input_shape, grid_shape, interpolation_mode, *args, out_shape=None, **kwargs) -> int:
    """``aten.grid_sampler_2d``: (N, C, H_out, W_out) outputs, each the weighted sum of its neighbours."""
    n, c, h, w = out_shape
    return 2 * n * c * h * w * _GRID_SAMPLE_NEIGHBOURS.get(int(interpolation_mode), 4)


def _grid_sampler_2d_backward_flop(grad_shape, input_shape, grid_shape, interpolation_mode, padding_mode,
                                   align_corners, output_mask, *args, out_shape=None, **kwargs) -> int:
    """``aten.grid_sampler_2d_backward``: the input's gradient (each output gradient times each
    neighbour's weight, accumulated) and the grid's (each channel's gradient times the neighbours'
    differences), each as many MACs as the forward."""
    n, c, h, w = grad_shape
    forward = n * c * h * w * _GRID_SAMPLE_NEIGHBOURS.get(int(interpolation_mode), 4)
    return 2 * forward * sum(bool(m) for m in output_mask)


def _embedding_bag_flop(weight_shape, indices_shape, offsets_shape=None, scale_grad_by_freq=False, mode=0,
                        sparse=False, per_sample_weights_shape=None, *args, out_shape=None, **kwargs) -> int:
    """``aten._embedding_bag``: with per-sample weights (mode "sum") one MAC per index and channel;
    a plain sum, mean or max of rows is element-wise work (like ``aten.sum``), not counted."""
    if per_sample_weights_shape is None:
        return 0
    indices = 1
    for s in indices_shape:
        indices *= s
    return 2 * indices * weight_shape[-1]


SAMPLING_FORMULAS: dict[Any, Callable[..., int]] = {
    aten.grid_sampler_2d: _grid_sampler_2d_flop,
    aten.grid_sampler_2d_backward: _grid_sampler_2d_backward_flop,
    aten._embedding_bag: _embedding_bag_flop,
    aten._embedding_bag_forward_only: _embedding_bag_flop,
}
"""``custom_mapping`` for ``FlopCounterMode``: bilinear sampling, which torch 2.14's counter leaves at
zero (``F.grid_sample``, forward and backward) and the weighted ``embedding_bag`` that
:func:`vision_attn.layers.multi_scale_deformable_attn` samples with (docs/flops.md)."""


def flop_counter(**kwargs: Any) -> FlopCounterMode:
    """A ``FlopCounterMode(display=False)`` that also counts the fused attention kernels and bilinear
    sampling (:data:`SAMPLING_FORMULAS`).

    Use it around any computation, a training step included (the backward kernels are covered);
    ``get_total_flops()`` returns FLOPs, 2 per MAC. Keyword arguments go to ``FlopCounterMode``.
    """
    mapping = {**FUSED_ATTENTION_FORMULAS, **SAMPLING_FORMULAS, **KERNEL_FLOP_FORMULAS,
               **kwargs.pop("custom_mapping", {})}
    kwargs.setdefault("display", False)
    return FlopCounterMode(custom_mapping=mapping, **kwargs)


# ------------------------------------------------------------------------------------------------
def _sdpa_signature(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                    enable_gqa=False):
    """The argument list of ``F.scaled_dot_product_attention``, used only to bind a call's arguments."""


_SDPA_SIGNATURE = inspect.signature(_sdpa_signature)


class _FusedAttentionOnMeta(TorchFunctionMode):
    """Run ``scaled_dot_product_attention`` on meta tensors through the CPU's fused kernel.

    On meta tensors SDPA decomposes into matrix products, which a plain counter counts; on the CPU the
    fused kernel runs, which it does not. Routing meta calls to the same kernel makes a meta count
    identical to a CPU count. Calls on other devices, and calls SDPA makes from inside another torch
    function, pass through unchanged.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            bound = _SDPA_SIGNATURE.bind(*args, **kwargs).arguments
            q, k, v = bound["query"], bound["key"], bound["value"]
            # the CPU's fused kernel takes equal query and value widths; otherwise SDPA runs (and
            # counts) as matrix products there, as it decomposes on meta
            if q.device.type == "meta" and q.dim() == k.dim() == v.dim() == 4 and q.shape[-1] == v.shape[-1]:
                if bound.get("enable_gqa") and k.shape[1] != q.shape[1]:
                    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
                    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
                mask = bound.get("attn_mask")
                if mask is not None and mask.dtype == torch.bool:  # only its shape matters on meta
                    mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device)
                out, _ = aten._scaled_dot_product_flash_attention_for_cpu(
                    q, k, v, bound.get("dropout_p", 0.0), bound.get("is_causal", False),
                    attn_mask=mask, scale=bound.get("scale"))
                return out
        return func(*args, **kwargs)


# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FlopReport:
    """What one forward pass of ``model`` on an input of ``input_shape`` (B, C, H, W) costs.

    ``macs``: multiply-accumulates (papers' "FLOPs"), fused attention included.
    ``fused_attention_macs``: the part counted by :data:`FUSED_ATTENTION_FORMULAS`, which a plain
    ``torch.utils.flop_counter`` (and fvcore, thop) leave out. ``by_module``: MACs per submodule
    (names relative to the model, at most ``depth`` levels deep; ``"(other)"`` holds what the model's
    own ``forward`` computes outside them), summing to ``macs``. ``by_op``: MACs per aten op.
    """

    model: str
    input_shape: tuple[int, ...]
    params: int
    macs: int
    fused_attention_macs: int
    device: str
    by_module: dict[str, int] = field(default_factory=dict)
    by_op: dict[str, int] = field(default_factory=dict)

    @property
    def flops(self) -> int:
        """FLOPs as ``torch.utils.flop_counter`` counts them: 2 per MAC."""
        return 2 * self.macs

    @property
    def macs_without_fused_attention(self) -> int:
        """What torch 2.14's plain counter (and fvcore, thop) read for the same CPU forward pass."""
        return self.macs - self.fused_attention_macs

    @property
    def gmacs(self) -> float:
        return self.macs / 1e9

    @property
    def gflops(self) -> float:
        return self.flops / 1e9

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the fields plus ``flops``, ``gmacs``, ``gflops`` and
        ``macs_without_fused_attention``."""
        d = asdict(self)
        d["input_shape"] = list(self.input_shape)
        d.update(flops=self.flops, gmacs=self.gmacs, gflops=self.gflops,
                 macs_without_fused_attention=self.macs_without_fused_attention)
        return d


def default_input_size(model: nn.Module) -> tuple[int, int, int]:
    """(C, H, W) the model was configured for: ``patch_embed.img_size`` and ``in_chans`` when it has
    a patch embedding, else (3, 224, 224)."""
    pe = getattr(model, "patch_embed", None)
    size = getattr(pe, "img_size", None)
    chans = getattr(pe, "in_chans", 3)
    if size is None:
        return (3, 224, 224)
    h, w = (size, size) if isinstance(size, int) else size
    return (int(chans), int(h), int(w))


def _input_shape(model: nn.Module, input_size: int | Sequence[int] | None, batch: int) -> tuple[int, ...]:
    if batch < 1:
        raise ConfigError(f"batch must be at least 1, got {batch}")
    chans, h, w = default_input_size(model)
    if input_size is None:
        size: tuple[int, ...] = (chans, h, w)
    elif isinstance(input_size, int):
        size = (chans, input_size, input_size)
    else:
        size = tuple(int(s) for s in input_size)
        if len(size) == 2:
            size = (chans, *size)
        if len(size) != 3:
            raise ConfigError(
                f"input_size {tuple(input_size)!r}: give an int (square image), (H, W) or (C, H, W)")
    if any(s < 1 for s in size):
        raise ConfigError(f"input_size {size!r} has a dimension below 1")
    return (batch, *size)


def _module_breakdown(counts: dict[str, dict[Any, int]], root: str, depth: int) -> dict[str, int]:
    """MACs per module name cut to ``depth`` levels below the root; sums to the total.

    ``counts`` holds inclusive FLOPs per called module (containers such as ``nn.ModuleList`` are never
    called, so never listed). Each module keeps what its nearest listed descendants do not account
    for; that exclusive count goes to its name cut to ``depth`` levels.
    """
    totals = {name: sum(ops.values()) for name, ops in counts.items()}
    exclusive = dict(totals)
    for name, n in totals.items():
        if name == "Global":
            continue
        parts = name.split(".")
        parent = next((".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)
                       if ".".join(parts[:i]) in totals), "Global")
        exclusive[parent] = exclusive.get(parent, 0) - n
    out: dict[str, int] = {}
    for name, n in exclusive.items():  # first-counted order: the order the modules ran in
        parts = name.split(".")
        key = ".".join(parts[1:depth + 1]) if name.startswith(root + ".") else "(other)"
        if n:
            out[key] = out.get(key, 0) + n // 2
    if "(other)" in out:
        out["(other)"] = out.pop("(other)")
    return out


def count_flops(
    model: nn.Module,
    input_size: int | Sequence[int] | None = None,
    batch: int = 1,
    *,
    depth: int = 2,
    name: str | None = None,
) -> FlopReport:
    """Count parameters and the MACs/FLOPs of one forward pass of ``model`` in eval mode.

    ``input_size``: an int (square image), (H, W) or (C, H, W); by default the size the model was
    configured for (:func:`default_input_size`). The input is a (batch, C, H, W) tensor of zeros on
    the device and dtype of the model's first parameter (or buffer); a model on the ``meta`` device
    is counted without any arithmetic. ``depth`` limits the module names of the breakdown. The
    model's training mode is restored.
    """
    first = next(iter(model.parameters()), next(iter(model.buffers()), None))
    device = first.device if first is not None else torch.device("cpu")
    dtype = first.dtype if first is not None and first.is_floating_point() else torch.float32
    shape = _input_shape(model, input_size, batch)
    with meta_shapes() if device.type == "meta" else contextlib.nullcontext():
        x = torch.zeros(shape, device=device, dtype=dtype)
    was_training = model.training
    model.eval()
    # count the standard kernels (aten.addmm), not the CPU fast paths: the same on every device; on
    # meta through our shape formulas, without importing torch's compiler stack (meta_shapes.py)
    counter = flop_counter(depth=depth)
    try:
        with torch.no_grad(), kernel_plan("aten"), count_on_meta(counter) if device.type == "meta" else counter:
            if device.type == "meta":  # elsewhere the model runs exactly as it would uncounted
                with _FusedAttentionOnMeta():
                    model(x)
            else:
                model(x)
    finally:
        model.train(was_training)
    counts = counter.get_flop_counts()
    global_ops = counts.get("Global", {})
    fused = sum(n for op, n in global_ops.items() if op in FUSED_ATTENTION_FORMULAS)
    return FlopReport(
        model=name or type(model).__name__,
        input_shape=shape,
        params=sum(p.numel() for p in model.parameters()),
        macs=counter.get_total_flops() // 2,
        fused_attention_macs=fused // 2,
        device=device.type,
        by_module=_module_breakdown(counts, type(model).__name__, depth),
        by_op={str(op): n // 2 for op, n in global_ops.items()},
    )


def count_model_flops(
    model: str | nn.Module,
    img_size: int | Sequence[int] | None = None,
    batch: int = 1,
    *,
    depth: int = 2,
    device: str | torch.device = "meta",
    model_kwargs: dict[str, Any] | None = None,
) -> FlopReport:
    """:func:`count_flops` of the registered model ``model``, built by
    ``create_model(model, **model_kwargs)`` on ``device`` (``"meta"`` by default: no memory, no
    arithmetic), or of a model instance as it is.

    ``img_size`` (int or (H, W); default: the variant's own size) is the size of the images the model
    runs on; the variant keeps its parameters (a ViT resamples its position table on the fly). To
    count a variant configured for another size, pass ``model_kwargs={"img_size": ...}``.
    """
    if isinstance(model, nn.Module):
        return count_flops(model, img_size, batch, depth=depth)
    with torch.device(device), meta_shapes() if torch.device(device).type == "meta" else contextlib.nullcontext():
        net = create_model(model, **(model_kwargs or {}))
    return count_flops(net, img_size, batch, depth=depth, name=model)


def module_tree(by_module: dict[str, int]) -> list[tuple[str, int, int]]:
    """The breakdown of :attr:`FlopReport.by_module` as a tree: ``(name, level, macs)`` rows, one per
    module and per enclosing module (level 0: children of the model), each with the MACs of
    everything below it, parents before their children, in execution order."""
    totals: dict[str, int] = {}
    for name, macs in by_module.items():
        parts = name.split(".") if name != "(other)" else [name]
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            totals[prefix] = totals.get(prefix, 0) + macs
    rows: list[tuple[str, int, int]] = []

    def walk(parent: str, level: int) -> None:
        for name in [n for n in totals if n.count(".") == level and (not parent or n.startswith(parent + "."))]:
            rows.append((name, level, totals[name]))
            walk(name, level + 1)

    walk("", 0)
    return rows
