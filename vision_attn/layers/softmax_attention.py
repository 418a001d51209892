"""softmax(q kᵀ/√d + mask) v on the CPU with the weights formed explicitly, where that beats the fused kernel.

torch's fused CPU kernel (``_scaled_dot_product_flash_attention_for_cpu``) is slow in bfloat16 at
the sequence lengths of ViT and Swin. Measured on this project's machine (AMD EPYC, 2 threads), a
forward and backward pass in bf16 over (8, 6, 197, 64) takes 20.9 ms fused and 9.4 ms as batched
matrix products and a softmax, over (4, 6, 577, 64) (ViT at 384 px) 81 ms against 59 ms; at 1024
tokens the fused kernel is faster (77 ms against 88 ms). In fp32 the two are about even.
:func:`attention_kernel` measures both on the machine, once per dtype and thread count (kept in the
same cache file as the linear layers' choices), and the explicit path runs where it was faster, for
sequences of at most :data:`MAX_EXPLICIT_TOKENS` tokens.

The explicit path keeps nothing of size (N, N) between the passes: the backward recomputes the
weights from q and k (:func:`attention_backward`, which Swin's packed attention shares). Its
precision is that of attention written out in the dtype: in bf16 the logits q kᵀ are rounded to
bf16, as in timm's non-fused attention under autocast (the softmax accumulates in fp32); the
outputs and gradients are within about 2x of the fused kernel's bf16 error (tests/layers/test_softmax_attention.py).
"""
from __future__ import annotations

import functools
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

from vision_attn.layers import linear as _linear

MAX_EXPLICIT_TOKENS = 600
"""The longest sequence the explicit path takes (ViT and DeiT at 384 px: 577 and 578 tokens); longer
ones (YOLO's area attention on large maps) run the fused kernel, which never forms the (N, N) weights."""

PROBE_SHAPE = (4, 6, 197, 64)
"""(B, heads, N, d) of the operands :func:`measure_attention` times: ViT-S at 224 px, batch 4."""


def _weights(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """softmax(q kᵀ · scale + mask) over (B, G, N, d) operands -> (B, G, N, M) in q's dtype. One
    ``baddbmm`` scales the product and adds the mask before its single rounding to the dtype (over
    Swin's windows in bf16 2.3x faster than a product, then an addition); the softmax overwrites
    the logits, one (N, M) buffer fewer to fill (bf16 inference of ViT-S about 10% faster,
    docs/benchmarks.md, "The softmax in place")."""
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


def _recording(t: torch.Tensor) -> bool:
    """Autograd records ops on ``t``: in-place ``out=`` kernels cannot be used on it."""
    return torch.is_grad_enabled() and t.requires_grad


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      mask: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q kᵀ/√d + mask) v for (B, G, N, d) operands, written out: (B, G, N, d)."""
    return torch.matmul(_weights(q, k, mask, q.shape[-1] ** -0.5), v)


def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                       dout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv, dS) of softmax(q kᵀ/√d + mask) v, all (B, G, N, ·), from the output's
    gradient ``dout``: the weights P are recomputed, dS = P ∘ (dP − rowsum(dP ∘ P)) with dP = dO vᵀ is
    the gradient of the logits, and so of an additive mask (summed where it broadcasts). The
    softmax and its gradient are computed in place (row by row), so that the pass holds two (N, N)
    buffers, not four."""
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
    """softmax(q kᵀ/√d + mask) v, (B, G, N, d) -> (B, G, N, d), on the explicit path, differentiable
    (with a recomputing backward) when autograd records a graph."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, mask)):
        return _ExplicitAttention.apply(q, k, v, mask)
    return attention_forward(q, k, v, mask)


# ------------------------------------------------------------------------------------------------
KERNELS: dict[str, Callable[..., torch.Tensor]] = {
    "fused": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    "explicit": explicit_attention,
}


def measure_attention(dtype: torch.dtype = torch.float32, shape: tuple[int, int, int, int] = PROBE_SHAPE,
                      rounds: int = 5, clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Time a forward and backward pass of both kernels on random ``shape`` operands in ``dtype``,
    alternating their order every round; returns ``{"kernel": the faster by the median, "seconds":
    kernel -> median}``. An explicit result that does not agree with the fused one (relative to the
    largest entry: 1e-4 in fp32, 2e-2 in bf16) is never chosen."""
    # outside the caller's autocast, dispatch modes and inference mode (the backward is timed too)
    with torch.inference_mode(False), _linear.self_check_context():
        gen = torch.Generator().manual_seed(0)
        q, k, v, g = (torch.randn(*shape, generator=gen).to(dtype) for _ in range(4))
        ref, out = KERNELS["fused"](q, k, v).float(), KERNELS["explicit"](q, k, v).float()
        if not bool((out - ref).abs().max() <= (1e-4 if dtype == torch.float32 else 2e-2) * ref.abs().max()):
            return {"kernel": "fused", "seconds": {}}
        leaves = [t.requires_grad_() for t in (q, k, v)]
        with torch.enable_grad():
            seconds = _linear.median_seconds(
                {name: (lambda fn=fn: fn(*leaves).backward(g)) for name, fn in KERNELS.items()}, rounds, clock)
    return {"kernel": min(seconds, key=seconds.__getitem__), "seconds": seconds}


@functools.cache
def _choice(dtype: torch.dtype, threads: int) -> str:
    entry = _linear.cached_measurement(
        f"attention; {_linear.plan_key(dtype, threads)}",
        lambda: measure_attention(dtype, clock=_linear.self_check_clock(threads)),
        lambda e: isinstance(e, dict) and e.get("kernel") in KERNELS)
    return entry["kernel"]


def attention_kernel(dtype: torch.dtype) -> str:
    """``"explicit"`` or ``"fused"``: the faster for ``dtype`` at the current thread count, as
    :func:`measure_attention` found on this machine (about 0.1-0.3 s, once; then read from the cache)."""
    return _choice(dtype, torch.get_num_threads())


def use_explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                 dropout_p: float = 0.0) -> bool:
    """Whether :func:`explicit_attention` computes this call exactly as a drop-in: CPU tensors in
    float32 or bfloat16, no dropout, at most :data:`MAX_EXPLICIT_TOKENS` tokens, outside tracing,
    export, torch.compile, torch.func transforms and forward-mode AD, the CPU fast paths on
    (``VISION_ATTN_ONEDNN``), and the explicit kernel measured faster for the dtype."""
    if any(isinstance(t, (torch.fx.Proxy, torch._subclasses.FakeTensor)) for t in (q, k, v, mask)):
        return False
    if dropout_p or not _linear.fast_paths_enabled() or q.device.type != "cpu":
        return False
    if q.dtype not in (torch.float32, torch.bfloat16) or not (k.dtype == v.dtype == q.dtype):
        return False
    if mask is not None and (mask.dtype != q.dtype or mask.device != q.device):
        return False
    if q.dim() != 4 or q.shape[-2] > MAX_EXPLICIT_TOKENS or k.shape[-2] > MAX_EXPLICIT_TOKENS:
        return False
    if _linear.capturing_graph() or _linear.autograd_transforms_active():
        return False
    return attention_kernel(q.dtype) == "explicit"
