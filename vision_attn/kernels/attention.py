"""Attention on the CPU fast paths: :func:`sdpa` and, for packed q/k/v with a learned additive
mask (Swin's relative position bias), :func:`packed_sdpa`.

Both compute softmax(q kᵀ/√d + mask) v. On the CPU the plan chooses per dtype between
``scaled_dot_product_attention`` (``"fused"``) and the explicit product of
:mod:`~vision_attn.kernels.explicit`; the explicit path is used only where it is exactly a drop-in
(CPU tensors in float32 or bfloat16, no dropout, at most :data:`MAX_EXPLICIT_TOKENS` tokens, outside
graph capture, torch.func transforms and forward-mode AD). Everywhere else the fused kernel runs.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from vision_attn.kernels.capture import autograd_transforms_active, capturing_graph, fake, fx_tracing, onnx_exporting
from vision_attn.kernels.explicit import PackedBiasedAttention, explicit_attention, split_packed
from vision_attn.kernels.plan import current_plan

__all__ = ["sdpa", "packed_sdpa", "MAX_EXPLICIT_TOKENS"]

MAX_EXPLICIT_TOKENS = 600
"""The longest sequence the explicit path takes (ViT and DeiT at 384 px: 577 and 578 tokens); longer
ones (YOLO's area attention on large maps) run the fused kernel, which never forms the (N, N) weights."""


def _explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
              dropout_p: float = 0.0) -> bool:
    """Whether the plan's explicit kernel computes this call as a drop-in."""
    if fx_tracing(q, k, v, mask) or dropout_p or q.device.type != "cpu" or fake(q, k, v, mask):
        return False
    if q.dtype not in (torch.float32, torch.bfloat16) or not (k.dtype == v.dtype == q.dtype):
        return False
    if mask is not None and (mask.dtype != q.dtype or mask.device != q.device):
        return False
    if q.dim() != 4 or q.shape[-2] > MAX_EXPLICIT_TOKENS or k.shape[-2] > MAX_EXPLICIT_TOKENS:
        return False
    plan = current_plan()
    if not plan.fast_paths or capturing_graph() or autograd_transforms_active():
        return False
    return plan.choice(q.dtype).attention == "explicit"


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
         dropout_p: float = 0.0) -> torch.Tensor:
    """softmax(q kᵀ/√d + attn_mask) v over (B, heads, N, d) operands -> (B, heads, N, d), with
    ``F.scaled_dot_product_attention``'s signature; ``attn_mask`` is additive and broadcasts to
    (B, heads, N, M)."""
    if _explicit(q, k, v, attn_mask, dropout_p):
        return explicit_attention(q, k, v, attn_mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)


def packed_sdpa(qkv: torch.Tensor, mask: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
    """softmax(q kᵀ/√d + mask) v for q, k, v packed as (B, N, G, 3, d) (G groups: windows x heads)
    and an additive ``mask`` broadcasting to (B, G, N, N) that may need a gradient, as a learned
    position bias does; returns (B, N, G, d).

    On the CPU in training: the plan's kernel forward and a recomputing backward
    (:class:`~vision_attn.kernels.explicit.PackedBiasedAttention`); torch's own fallback for a
    broadcast mask that needs a gradient is very slow. ONNX exporters get the explicit product as
    standard ops (the TorchScript exporter mis-broadcasts a fused call's mask); torch.export and
    torch.compile take the fused kernel, as the eager model does.
    """
    q, k, v = split_packed(qkv)
    if onnx_exporting():
        attn = (torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-2, -1)) + mask).softmax(dim=-1)  # (B, G, N, N)
        return torch.matmul(F.dropout(attn, dropout_p) if dropout_p else attn, v).transpose(1, 2)
    if not fx_tracing(qkv, mask) and torch.is_grad_enabled() and (qkv.requires_grad or mask.requires_grad):
        if (qkv.device.type == "cpu" and dropout_p == 0.0 and qkv.dtype in (torch.float32, torch.bfloat16)
                and not capturing_graph() and not fake(qkv, mask) and not autograd_transforms_active()):
            return PackedBiasedAttention.apply(qkv, mask, _explicit(q, k, v, mask))
        if mask.requires_grad:  # a full-size mask: the fused kernels differentiate it without a broadcast reduction
            mask = mask.expand(q.shape[0], -1, -1, -1)
    return sdpa(q, k, v, mask, dropout_p).transpose(1, 2)
