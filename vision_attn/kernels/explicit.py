"""softmax(q kᵀ/√d + mask) v with the weights formed explicitly, and a recomputing backward.

torch's fused CPU kernel (``_scaled_dot_product_flash_attention_for_cpu``) is slow in bfloat16 at the
sequence lengths of ViT and Swin, where batched matrix products and a softmax are faster; at long
sequences the fused kernel wins (docs/benchmarks.md, "CPU kernels"). The explicit path keeps nothing
of size (N, N) between the passes: the backward recomputes the weights from q and k
(:func:`attention_backward`, which Swin's packed attention shares). Its precision is that of attention
written out in the dtype: in bf16 the logits q kᵀ are rounded to bf16, as in timm's non-fused attention
under autocast (the softmax accumulates in fp32).
"""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["attention_forward", "attention_backward", "explicit_attention", "PackedBiasedAttention"]


def _recording(t: torch.Tensor) -> bool:
    """Autograd records ops on ``t``: in-place ``out=`` kernels cannot be used on it."""
    return torch.is_grad_enabled() and t.requires_grad


def _weights(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """softmax(q kᵀ · scale + mask) over (B, G, N, d) operands -> (B, G, N, M) in q's dtype. One
    ``baddbmm`` scales the product and adds the mask before its single rounding to the dtype; the
    softmax overwrites the logits, one (N, M) buffer fewer to fill."""
    B, G, N, d = q.shape
    M = k.shape[-2]
    if mask is None:
        base, beta = q.new_zeros(()).expand(B * G, N, M), 0.0
    else:
        base, beta = mask.expand(B, G, N, M).reshape(B * G, N, M), 1.0
    s = torch.baddbmm(base, q.reshape(B * G, N, d), k.reshape(B * G, M, d).transpose(1, 2), beta=beta, alpha=scale)
    if _recording(s):  # a backward of the backward (create_graph=True): no out= op, autograd records these
        return torch.softmax(s, dim=-1).view(B, G, N, M)
    return torch.softmax(s, dim=-1, out=s).view(B, G, N, M)  # in place: no second (N, M) buffer to fill


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      mask: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q kᵀ/√d + mask) v for (B, G, N, d) operands, written out: (B, G, N, d)."""
    return torch.matmul(_weights(q, k, mask, q.shape[-1] ** -0.5), v)


def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                       dout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv, dS) of softmax(q kᵀ/√d + mask) v, all (B, G, N, ·), from the output's
    gradient ``dout``: the weights P are recomputed, dS = P ∘ (dP − rowsum(dP ∘ P)) with dP = dO vᵀ is
    the gradient of the logits, and so of an additive mask (summed where it broadcasts). The
    softmax and its gradient are computed in place (row by row): two (N, N) buffers, not four."""
    scale = q.shape[-1] ** -0.5
    p = _weights(q, k, mask, scale)  # (B, G, N, N)
    dv = torch.matmul(p.transpose(-2, -1), dout)
    dp = torch.matmul(dout, v.transpose(-2, -1))  # (B, G, N, N)
    if _recording(dp) or _recording(p):
        ds = torch.ops.aten._softmax_backward_data(dp, p, -1, p.dtype)
    else:
        ds = torch.ops.aten._softmax_backward_data.out(dp, p, -1, p.dtype, grad_input=dp)  # in place, row by row
    del p
    (B, G, N, d), M = q.shape, k.shape[-2]
    ds3, zero = ds.view(B * G, N, M), q.new_zeros(())  # zero: the ignored beta=0 input, expanded
    dq = torch.baddbmm(zero.expand(B * G, N, d), ds3, k.reshape(B * G, M, d), beta=0.0, alpha=scale)
    dk = torch.baddbmm(zero.expand(B * G, M, d), ds3.transpose(1, 2), q.reshape(B * G, N, d), beta=0.0, alpha=scale)
    return dq.view(B, G, N, d), dk.view(B, G, M, d), dv, ds


class _ExplicitAttention(torch.autograd.Function):
    """:func:`attention_forward` with :func:`attention_backward`; ``mask`` may need a gradient (a
    learned bias), and broadcasts to (B, G, N, N)."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        with torch.autocast("cpu", enabled=False):
            out = attention_forward(q, k, v, mask)
        ctx.save_for_backward(q, k, v, mask)
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, mask = ctx.saved_tensors
        with torch.autocast("cpu", enabled=False):
            dq, dk, dv, ds = attention_backward(q, k, v, mask, dout)
        dmask = ds.sum_to_size(mask.shape).to(mask.dtype) if mask is not None and ctx.needs_input_grad[3] else None
        return dq, dk, dv, dmask


def explicit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       mask: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q kᵀ/√d + mask) v, (B, G, N, d) -> (B, G, N, d), differentiable (with a recomputing
    backward) when autograd records a graph."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, mask)):
        return _ExplicitAttention.apply(q, k, v, mask)
    return attention_forward(q, k, v, mask)


def split_packed(qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Packed (B, N, G, 3, d) -> q, k, v as strided views (B, G, N, d)."""
    q, k, v = qkv.unbind(3)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


class PackedBiasedAttention(torch.autograd.Function):
    """softmax(q kᵀ/√d + mask) v on the CPU for packed qkv (B, N, G, 3, d) and an additive mask
    (1 or B, G, N, N) that needs a gradient; returns (B, N, G, d).

    Forward: the fused flash kernel on strided views, or the explicit product (``explicit``).
    Backward: the weights recomputed from q, k and the mask (:func:`attention_backward`); the gradient
    of qkv is written in its packed layout, the mask's is dS summed over the batch where it broadcasts.
    torch's own fallback for a broadcast mask that needs a gradient is very slow.
    """

    @staticmethod
    def forward(ctx: Any, qkv: torch.Tensor, mask: torch.Tensor, explicit: bool) -> torch.Tensor:
        q, k, v = split_packed(qkv)
        if explicit:
            out = attention_forward(q, k, v, mask).transpose(1, 2)  # (B, N, G, d)
        else:
            out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=mask)
            out = out.transpose(1, 2)  # (B, N, G, d): the kernel's own memory layout
        ctx.save_for_backward(qkv, mask)
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        qkv, mask = ctx.saved_tensors
        q, k, v = (t.contiguous() for t in split_packed(qkv))  # (B, G, N, d)
        dq, dk, dv, ds = attention_backward(q, k, v, mask, dout.transpose(1, 2).contiguous())
        del q, k, v
        dqkv = torch.empty_like(qkv)  # (B, N, G, 3, d): the gradients in the packed layout
        for i, grad in enumerate((dq, dk, dv)):
            dqkv[..., i, :].copy_(grad.transpose(1, 2))
        dmask = ds.sum_to_size(mask.shape).to(mask.dtype) if ctx.needs_input_grad[1] else None
        return dqkv, dmask, None
