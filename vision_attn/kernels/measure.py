"""The self-checks: each kernel family timed on this machine, once per dtype and thread count.

Linear layers: the three products of a training step (forward ``x Wᵀ + b``, input gradient ``g W``,
weight gradient ``gᵀ x``), each through oneDNN and through ATen (MKL's GEMM), on ViT-S's MLP
(:data:`CHECK_SHAPE`); where oneDNN wins, both are timed again on a small product
(:data:`SMALL_SHAPE`) and the size from which oneDNN is faster is fitted: oneDNN costs more per
call than ATen, so a small layer is faster through ATen. Attention: a forward and backward pass of
the fused kernel and of the explicit one (:data:`PROBE_SHAPE`). A result that does not agree with
the reference kernel's is never chosen. A measurement takes about 0.1-0.3 s; its choice is kept in
the cache (:mod:`~vision_attn.kernels.cache`), so that later processes make the same one.
"""
from __future__ import annotations

import functools
import math
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

from vision_attn.kernels.explicit import explicit_attention
from vision_attn.kernels.onednn import PRODUCTS, agrees
from vision_attn.kernels.timing import crossover, fastest_seconds, self_check_context

__all__ = ["CHECK_SHAPE", "SMALL_SHAPE", "PROBE_SHAPE", "measure_linear", "measure_attention", "product_operands",
           "ATTENTION"]

CHECK_SHAPE = (256, 384, 1536)
"""(M, K, N) of the products :func:`measure_linear` times: ViT-S's MLP at 256 tokens."""

SMALL_SHAPE = (16, 128, 384)
"""(M, K, N) of the small products it also times (a width-128 layer at 16 tokens): with
:data:`CHECK_SHAPE`, the two sizes from which each kernel's fixed cost per call and cost per
multiply-add are fitted."""

SMALL_REPEAT = 20
"""Calls per timing at :data:`SMALL_SHAPE` (one call there takes tens of microseconds)."""

PROBE_SHAPE = (4, 6, 197, 64)
"""(B, heads, N, d) of the operands :func:`measure_attention` times: ViT-S at 224 px, batch 4."""

ATTENTION: dict[str, Callable[..., torch.Tensor]] = {
    "fused": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    "explicit": explicit_attention,
}
"""The two attention kernels by name, (B, G, N, d) operands."""


def product_operands(dtype: torch.dtype, shape: tuple[int, int, int]) -> dict[str, tuple[torch.Tensor, ...]]:
    """Random operands of each product for ``shape`` (M, K, N)."""
    M, K, N = shape
    gen = torch.Generator().manual_seed(0)  # not the global stream: a training run's draws stay as they were
    x, w, g = (torch.randn(*s, generator=gen).to(dtype) for s in ((M, K), (N, K), (M, N)))
    b = torch.randn(N, generator=gen).to(dtype)
    return {"forward": (x, w, b), "input_grad": (g, w), "weight_grad": (g, x)}


def measure_linear(dtype: torch.dtype = torch.float32, shape: tuple[int, int, int] = CHECK_SHAPE,
                   rounds: int = 5, clock: Callable[[], float] = time.perf_counter,
                   small_shape: tuple[int, int, int] = SMALL_SHAPE) -> dict[str, Any]:
    """Time each product's two kernels on random ``shape`` operands in ``dtype``, alternating their
    order every round, and choose the faster by the fastest round; a oneDNN result that does not agree with
    ATen's (relative to the largest entry: 1e-5 in fp32, 1e-2 in bf16) is never chosen. Where oneDNN
    is chosen, both are timed again at ``small_shape`` and the size from which oneDNN is faster is
    fitted (:func:`~vision_attn.kernels.timing.crossover`). Returns ``{product: kernel, ...,
    "onednn_from": {product: multiply-adds}, "seconds": {"large": .., "small": ..}}``."""
    operands, small_operands = product_operands(dtype, shape), product_operands(dtype, small_shape)
    choice: dict[str, str] = {}
    large: dict[str, dict[str, float]] = {}
    small: dict[str, dict[str, float]] = {}
    onednn_from: dict[str, int] = {}
    with self_check_context():
        for product, args in operands.items():
            kernels = PRODUCTS[product]
            if not agrees(kernels["onednn"](*args), kernels["aten"](*args)):
                choice[product] = "aten"
                continue
            large[product] = fastest_seconds({k: functools.partial(fn, *args) for k, fn in kernels.items()},
                                            rounds, clock)
            choice[product] = min(large[product], key=large[product].__getitem__)
            if choice[product] == "onednn":
                few = small_operands[product]
                small[product] = fastest_seconds({k: functools.partial(fn, *few) for k, fn in kernels.items()},
                                                rounds, clock, SMALL_REPEAT)
                onednn_from[product] = crossover(small[product], large[product], math.prod(small_shape),
                                                 math.prod(shape))
    return {**choice, "onednn_from": onednn_from, "seconds": {"large": large, "small": small}}


def measure_attention(dtype: torch.dtype = torch.float32, shape: tuple[int, int, int, int] = PROBE_SHAPE,
                      rounds: int = 5, clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Time a forward and backward pass of both attention kernels on random ``shape`` operands in
    ``dtype``, alternating their order every round; returns ``{"kernel": the faster by the fastest round,
    "seconds": kernel -> that round's seconds}``. An explicit result that does not agree with the fused one
    (relative to the largest entry: 1e-4 in fp32, 2e-2 in bf16) is never chosen."""
    with self_check_context():
        gen = torch.Generator().manual_seed(0)
        q, k, v, g = (torch.randn(*shape, generator=gen).to(dtype) for _ in range(4))
        if not agrees(ATTENTION["explicit"](q, k, v), ATTENTION["fused"](q, k, v), 1e-4, 2e-2):
            return {"kernel": "fused", "seconds": {}}
        leaves = [t.requires_grad_() for t in (q, k, v)]
        with torch.enable_grad():
            seconds = fastest_seconds(
                {name: (lambda fn=fn: fn(*leaves).backward(g)) for name, fn in ATTENTION.items()}, rounds, clock)
    return {"kernel": min(seconds, key=seconds.__getitem__), "seconds": seconds}
