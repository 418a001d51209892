"""The CPU fast paths applied to a built model from outside: :func:`accelerate`.

The layers of :mod:`vision_attn.layers` and :mod:`vision_attn.models` are plain PyTorch (``nn.Linear``,
``F.scaled_dot_product_attention``, tables built on every call). :func:`accelerate` changes a model in
place, as ``torch.ao`` swaps modules, with its parameters, buffers and state-dict keys unchanged:

- every ``nn.Linear`` becomes a :class:`~vision_attn.kernels.linear.FusedLinear` (its forward through
  the kernels of the plan);
- every layer that declares ``sdpa = staticmethod(F.scaled_dot_product_attention)`` calls
  :func:`~vision_attn.kernels.attention.sdpa` instead (the plan's fused or explicit kernel), and
  deformable attention's ``sample`` becomes :func:`~vision_attn.kernels.deformable.deformable_sample`
  and a Swin block's ``gather`` :func:`~vision_attn.kernels.gather.gather_tokens` (:data:`SEAMS`);
- a feed-forward network's first linear layer and its GELU run as one kernel (:class:`FastMlp`,
  :class:`FastAIFI`);
- window attention takes its q/k/v rows by head from a packed weight and attends through
  :func:`~vision_attn.kernels.attention.packed_sdpa` (:class:`FastWindowAttention`); Swin V2's
  continuous bias is kept between inference calls while its MLP is unchanged, q and k scaled in place
  (:class:`FastCosineWindowAttention`);
- the layers' tables (window orders, masks, position tables) are kept between calls
  (:class:`KeptTables`), built afresh in a graph being captured;
- a pre-norm Transformer block of the standard form (LayerNorm, :class:`~vision_attn.layers.attention.Attention`,
  a GELU :class:`~vision_attn.layers.mlp.Mlp`) runs inference as PyTorch's one native encoder-layer
  op, the kernel behind ``nn.TransformerEncoderLayer``'s inference fast path (:class:`FastBlock`).

The plan is read at each call, so an accelerated model under the ``"aten"`` plan computes with
PyTorch's standard kernels.
"""
from __future__ import annotations

import functools
from typing import Callable, Hashable, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.kernels.attention import packed_sdpa, sdpa
from vision_attn.kernels.capture import autograd_transforms_active, tracing
from vision_attn.kernels.deformable import deformable_sample
from vision_attn.kernels.gather import gather_tokens
from vision_attn.kernels.linear import FusedLinear, fused_linear, linear_act
from vision_attn.kernels.onednn import DTYPES
from vision_attn.kernels.plan import KernelPlan, current_plan
from vision_attn.layers.attention import Attention
from vision_attn.layers.block import Block
from vision_attn.layers.cosine_window_attention import CosineWindowAttention
from vision_attn.layers.deformable_attention import sample_standard
from vision_attn.layers.mlp import Mlp
from vision_attn.layers.tables import Tables
from vision_attn.layers.window_attention import WindowAttention
from vision_attn.layers.window_attention import gather_tokens as plain_gather_tokens
from vision_attn.models.yolo.rtdetr import AIFI

__all__ = ["accelerate", "needs_kernels", "FastBlock", "FastMlp", "FastAIFI", "FastWindowAttention", "FastCosineWindowAttention", "KeptTables", "SEAMS"]

T = TypeVar("T")


class KeptTables(Tables):
    """:class:`~vision_attn.layers.tables.Tables` kept in a plain dict, built once per key (never in the
    state dict, never moved by ``.to``: a key names its device and dtype). Built as normal tensors even
    under ``torch.inference_mode``, so that a later pass that records gradients can use them; built in
    the graph every time while a model is compiled, traced or exported (or a ``values`` is a torch.fx
    proxy)."""

    def get(self, key: Hashable, build: Callable[[], T], *values: object) -> T:
        if tracing(*values):
            return build()
        kept = self.__dict__.setdefault("_kept", {})
        if key not in kept:
            with torch.inference_mode(False):
                kept[key] = build()
        return kept[key]

    def __len__(self) -> int:
        return len(self.__dict__.get("_kept", {}))

    def clear(self) -> None:
        self.__dict__.get("_kept", {}).clear()


class FastMlp(Mlp):
    """:class:`~vision_attn.layers.mlp.Mlp` with ``fc1`` and its GELU as one kernel (:func:`linear_act`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.drop1(linear_act(self.fc1, x, self.act))  # (..., hidden)
        return self.drop2(self.fc2(x))


def _state_key(params: tuple[torch.Tensor, ...] | list[torch.Tensor]) -> tuple:
    """What a copy derived from ``params`` depends on: each tensor's device, dtype, storage and version
    counter (an optimiser step or a ``load_state_dict`` changes it)."""
    return tuple((p.device, p.dtype, p.data_ptr(), p._version) for p in params)


def _standard_form(block: Block) -> bool:
    """Whether ``block`` computes exactly what the native encoder layer does: LayerNorms with biases,
    plain multi-head attention with both biases and no q/k norm, a GELU (exact) MLP with biases, every
    linear layer an ``nn.Linear`` (not a quantized one), no layer scale, and no hook on any part of it."""
    attn, mlp, n1, n2 = block.attn, block.mlp, block.norm1, block.norm2
    parts = (attn, attn.qkv, attn.proj, mlp, mlp.fc1, mlp.act, mlp.fc2, n1, n2)
    return (type(attn).forward is Attention.forward and type(attn.q_norm) is nn.Identity
            and type(attn.k_norm) is nn.Identity and not attn.keep_weights
            and type(mlp).forward in (Mlp.forward, FastMlp.forward) and type(mlp.act) is nn.GELU
            and mlp.act.approximate == "none" and type(block.ls1) is nn.Identity and type(block.ls2) is nn.Identity
            and type(n1) is nn.LayerNorm and type(n2) is nn.LayerNorm and n1.eps == n2.eps
            and all(isinstance(lin, nn.Linear) for lin in (attn.qkv, attn.proj, mlp.fc1, mlp.fc2))  # not quantized
            and all(p is not None for p in (attn.qkv.bias, attn.proj.bias, mlp.fc1.bias, mlp.fc2.bias, n1.bias, n2.bias))
            and not any(m._forward_hooks or m._forward_pre_hooks for m in parts)
            and not (nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks))


class FastBlock(Block):
    """A pre-norm block whose inference (no gradient recorded, eval mode, no rotary tables or padding
    mask, no graph being captured) is ``torch._transformer_encoder_layer_fwd``: the whole block in one
    native op, as ``nn.TransformerEncoderLayer`` runs in eval mode. Under bf16 autocast on the CPU the
    op runs in bfloat16 on weights cast once (kept while the weights are unchanged) and the result
    returns in the input's dtype. A block of another form (:func:`_standard_form`), training, and a
    plan that puts the linear layers' inference on oneDNN (where the block is accelerated with
    kernels) take the layers' own path."""

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None,
                attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        dtype = self._native(x) if rope is None and attn_mask is None else None
        if dtype is None:
            return super().forward(x, rope, attn_mask)
        qkv_w, qkv_b, proj_w, proj_b, n1_w, n1_b, n2_w, n2_b, fc1_w, fc1_b, fc2_w, fc2_b = self._weights(dtype)
        with torch.autocast(x.device.type, enabled=False):
            y = torch._transformer_encoder_layer_fwd(  # (B, N, D)
                x.to(dtype), x.shape[-1], self.attn.num_heads, qkv_w, qkv_b, proj_w, proj_b, True, True,
                self.norm1.eps, n1_w, n1_b, n2_w, n2_b, fc1_w, fc1_b, fc2_w, fc2_b, None, None)
        return y.to(x.dtype)

    def _native(self, x: torch.Tensor) -> torch.dtype | None:
        """The dtype the native op computes ``x`` in, or None where the layers' path runs."""
        if (self.training or not isinstance(x, torch.Tensor) or x.dim() != 3 or not _standard_form(self)
                or (torch.is_grad_enabled() and (x.requires_grad or self.attn.qkv.weight.requires_grad))
                or tracing(x) or autograd_transforms_active()):
            return None
        weight = self.attn.qkv.weight.dtype
        if torch.is_autocast_enabled(x.device.type):
            autocast = torch.get_autocast_dtype(x.device.type)
            ok = x.device.type == "cpu" and autocast == torch.bfloat16 and x.dtype in DTYPES and weight in DTYPES
            dtype = torch.bfloat16 if ok else None
        else:
            dtype = x.dtype if x.dtype == weight else None
        if dtype is not None and isinstance(self.attn.qkv, FusedLinear):  # the plan's inference kernel decides
            plan = current_plan()
            return dtype if not plan.fast_paths or plan.choice(dtype).inference != "onednn" else None
        return dtype

    def _weights(self, dtype: torch.dtype) -> list[torch.Tensor]:
        """The op's twelve weights in ``dtype`` (cast copies kept until a weight changes)."""
        a, m = self.attn, self.mlp
        params = [a.qkv.weight, a.qkv.bias, a.proj.weight, a.proj.bias, self.norm1.weight, self.norm1.bias,
                  self.norm2.weight, self.norm2.bias, m.fc1.weight, m.fc1.bias, m.fc2.weight, m.fc2.bias]
        if all(p.dtype == dtype for p in params):
            return params
        key = (dtype, _state_key(params))
        kept = self.__dict__.get("_cast")
        if kept is None or kept[0] != key:
            with torch.no_grad():
                kept = self.__dict__["_cast"] = (key, [p.detach().to(dtype) for p in params])
        return kept[1]


class FastAIFI(AIFI):
    """RT-DETR's :class:`~vision_attn.models.yolo.rtdetr.AIFI` with ``fc1`` and its GELU as one kernel."""

    def _ffn(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(linear_act(self.fc1, x, self.act)))


class FastWindowAttention(WindowAttention):
    """Window attention whose qkv projection runs on the plan's kernels with the weight's rows in
    (head, q/k/v, d) order (a frozen layer keeps that copy packed), and whose attention is
    :func:`packed_sdpa` (a learned bias broadcast over the batch, a recomputing backward)."""

    def _qkv_by_head(self, x: torch.Tensor) -> torch.Tensor:
        b = self.qkv_bias()
        frozen = isinstance(self.qkv, FusedLinear) and self.qkv._packed is not None
        packed = (lambda: self.qkv.packed_weight("by_head", self.rows_by_head)) if frozen else None
        return fused_linear(x, self.rows_by_head(self.qkv.weight),
                            self.rows_by_head(b[:, None]).flatten() if b is not None else None, packed=packed)

    def attend(self, qkv: torch.Tensor, mask: torch.Tensor,
               dropout_p: float = 0.0) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.keep_weights:
            return super().attend(qkv, mask, dropout_p)
        return packed_sdpa(qkv, mask, dropout_p), None


class FastCosineWindowAttention(FastWindowAttention, CosineWindowAttention):
    """Swin V2's window attention where no gradient flows: the continuous bias kept until the MLP's
    weights change (keyed by each parameter's storage and version counter, so that an optimiser step
    or a ``load_state_dict`` recomputes it), q and k normalised and scaled in place."""

    def relative_position_bias(self) -> torch.Tensor:
        params = tuple(self.cpb_mlp.parameters())
        if tracing() or (torch.is_grad_enabled() and any(p.requires_grad for p in params)):
            return self._continuous_bias()
        key = _state_key(params)
        cached = self.__dict__.get("_bias_cache")
        if cached is None or cached[0] != key:
            with torch.inference_mode(False), torch.no_grad():  # a normal tensor: usable where gradients flow
                cached = self.__dict__["_bias_cache"] = (key, self._continuous_bias())
        return cached[1]

    def scale_qk(self, qkv: torch.Tensor) -> torch.Tensor:
        B, N, G, _, d = qkv.shape
        h = self.num_heads
        factor = self.qk_factors(qkv)  # (heads, 2)
        if tracing(qkv) or (torch.is_grad_enabled() and (qkv.requires_grad or factor.requires_grad)):
            return super().scale_qk(qkv)
        qk = qkv.view(B, N, G // h, h, 3, d)[..., :2, :]  # the projection's fresh output, scaled in place
        norm = torch.linalg.vector_norm(qk, dim=-1, keepdim=True).clamp_min_(1e-12)  # (B, N, nW, heads, 2, 1)
        qk.mul_(factor[..., None] / norm)
        return qkv


SEAMS: dict[str, tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor]]] = {
    "sdpa": (F.scaled_dot_product_attention, sdpa),
    "sample": (sample_standard, deformable_sample),
    "gather": (plain_gather_tokens, gather_tokens),
}
"""A layer's function attribute (a ``staticmethod``) -> (its plain function, the fast path that replaces it)."""

KERNEL_SEAMS = frozenset({"sdpa"})
"""The seams whose fast path is a choice of kernel (the plan's); the others are faster whatever the plan."""

_FAST_FORMS: tuple[tuple[type, type, bool], ...] = (
    (Block, FastBlock, False), (Mlp, FastMlp, True), (AIFI, FastAIFI, True), (CosineWindowAttention, FastCosineWindowAttention, False),
    (WindowAttention, FastWindowAttention, False),
)
"""Each layer class with the subclass that holds its fast path (and whether that path is a choice of
kernel), the most specific first; a subclass of the layer that overrides the same methods itself is
left as it is."""


@functools.cache
def _fast_class(cls: type, plain: type, fast: type) -> type:
    """``cls`` (``plain`` or a subclass of it) with ``fast``'s methods: ``fast`` itself for ``plain``, else
    a subclass of both under ``cls``'s name (a variant's or a user's subclass keeps what it adds)."""
    if cls is plain:
        return fast
    return type(cls.__name__, (fast, cls), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})


def _fast_form(module: nn.Module, kernels: bool) -> type | None:
    """The class ``module`` takes on the fast path; None where it has none (``kernels`` False: none that
    is a choice of kernel), or where its own class overrides a method the fast path replaces (its
    override is kept)."""
    cls = type(module)
    for plain, fast, kernel_choice in _FAST_FORMS:
        if kernel_choice and not kernels:
            continue
        if isinstance(module, plain) and not isinstance(module, fast):
            replaced = {name for c in fast.__mro__ if c not in plain.__mro__ for name in vars(c) if not name.startswith("__")}
            if any(getattr(cls, name, None) is not getattr(plain, name, None) for name in replaced):
                return None
            return _fast_class(cls, plain, fast)
    return None


def accelerate(model: nn.Module, kernels: bool = True) -> nn.Module:
    """``model`` (in place, and returned) on the CPU fast paths; the same parameters, buffers,
    state-dict keys and outputs up to the kernels' rounding. Applying it twice changes nothing.

    ``kernels=False``: only the fast paths that are no choice of kernel (tables kept, Swin's packed
    window attention and gather, deformable sampling); linear layers, feed-forward networks and
    attention stay PyTorch's own, without the plan's dispatch in every call (what a plan of PyTorch's
    kernels runs fastest: :func:`needs_kernels`)."""
    for module in model.modules():
        if kernels and type(module) is nn.Linear:
            module.__class__ = FusedLinear
        fast = _fast_form(module, kernels)
        if fast is not None:
            module.__class__ = fast
        for name, (plain, fast_fn) in SEAMS.items():
            if (kernels or name not in KERNEL_SEAMS) and getattr(type(module), name, None) is plain:
                setattr(module, name, fast_fn)
        for value in list(vars(module).values()):
            if isinstance(value, Tables) and not isinstance(value, KeptTables):
                value.__class__ = _fast_class(type(value), Tables, KeptTables)
    return model


def needs_kernels(plan: KernelPlan, dtype: torch.dtype) -> bool:
    """Whether ``plan`` runs any kernel but PyTorch's standard ones for ``dtype`` (else a model is
    accelerated with ``kernels=False``)."""
    if not plan.fast_paths:
        return False
    choice = plan.choice(dtype)
    lin = choice.linear
    return not (choice.inference == "aten" and choice.attention == "fused"
                and lin.forward == lin.input_grad == lin.weight_grad == "aten")
