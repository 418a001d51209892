"""Multi-scale deformable attention's sampling on the CPU fast path: :func:`deformable_sample`.

The plain layer (:mod:`vision_attn.layers.deformable_attention`) sums each bag's bilinear corners with a
gather and a matrix product. Here the forward is one ``embedding_bag`` and the backward is written out
(:class:`_DeformableSampling`): the weights' gradient as a sampled matrix product over the bags' rows,
the value's gradient as the transposed bag (rows sorted by table row). Under graph capture (ONNX
export, tracing, ``torch.compile``) and for second derivatives the standard ops run.
"""
from __future__ import annotations

import warnings
from typing import Any

import torch

from vision_attn.kernels.capture import capturing_graph
from vision_attn.layers.deformable_attention import corners, sample_standard

__all__ = ["deformable_sample"]

_SUM = 0  # embedding_bag's mode "sum"


def _offsets(count: int, size: int, like: torch.Tensor) -> torch.Tensor:
    return torch.arange(0, count * size, size, dtype=like.dtype, device=like.device)


def _weight_grad(grad: torch.Tensor, table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """d out / d weights: (N, K), the dot product of each bag's output gradient (N, d) with each of its
    rows of the table (R, d). On the CPU a sampled matrix product over the bags' sparsity pattern (4x
    faster than embedding_bag's own per-weight backward there)."""
    n, k = rows.shape
    # The pattern's rows hold repeated and unsorted columns, which CSR's invariants exclude but the CPU
    # kernel computes entry by entry (the tests compare these gradients with ultralytics'); it needs no
    # more entries than the dense (N, R) shape holds.
    if table.device.type == "cpu" and table.dtype in (torch.float32, torch.float64) and k <= table.shape[0]:
        with warnings.catch_warnings():  # "sparse CSR tensor support is in beta state"
            warnings.simplefilter("ignore", UserWarning)
            pattern = torch.sparse_csr_tensor(_offsets(n + 1, k, rows), rows.reshape(-1),
                                              torch.ones(n * k, dtype=grad.dtype), size=(n, table.shape[0]),
                                              check_invariants=False)
        return torch.sparse.sampled_addmm(pattern, grad, table.t(), beta=0.0).values().view(n, k)
    return torch.ops.aten._embedding_bag_per_sample_weights_backward(
        grad, table, rows.reshape(-1), _offsets(n, k, rows), _offsets(n, 1, rows).repeat_interleave(k),
        _SUM, -1).view(n, k)


class _DeformableSampling(torch.autograd.Function):
    """The weighted sum of table rows as one ``embedding_bag`` with its backward written out.

    Inputs: ``table`` (R, d) the value, ``locations`` (N, L, P, 2), ``attention`` (N, L, P); output
    (N, d). The forward keeps the neighbours' rows and weights. The gradients of the locations and
    attention weights come from the gradient of each row's weight (one dot product per row), the
    table's from the transposed bag: every table row is a bag of the output gradients that read it.
    """

    @staticmethod
    def forward(ctx: Any, table: torch.Tensor, locations: torch.Tensor, attention: torch.Tensor,
                levels: list[tuple[int, int]], tokens: int, queries: int, heads: int) -> torch.Tensor:
        rows, weights, w, inside, size = corners(locations, attention, levels, tokens, queries, heads)
        n, k = rows.shape
        out = torch.ops.aten._embedding_bag(table, rows.reshape(-1), _offsets(n, k, rows), False, _SUM, False,
                                            weights.reshape(-1), False, -1)[0]  # (N, d)
        ctx.save_for_backward(table, locations, attention, rows, weights, w, inside)
        ctx.size, ctx.args = size, (levels, tokens, queries, heads)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        table, locations, attention, rows, weights, w, inside = ctx.saved_tensors
        need_table, need_loc, need_attn = ctx.needs_input_grad[:3]
        nones = (None, None, None, None)
        if torch.is_grad_enabled():  # create_graph: standard ops, which autograd can differentiate again
            inputs = [t for t, need in ((table, need_table), (locations, need_loc), (attention, need_attn)) if need]
            out = sample_standard(table, locations, attention, *ctx.args)
            grads = iter(torch.autograd.grad(out, inputs, grad, create_graph=True))
            return (next(grads) if need_table else None, next(grads) if need_loc else None,
                    next(grads) if need_attn else None, *nones)
        n, k = rows.shape
        grad = grad.contiguous()  # (N, d)
        grad_table = grad_loc = grad_attn = None
        if need_table:  # the transposed bag: each table row sums weight * grad over the samples that read it
            flat = rows.reshape(-1)
            order = flat.sort(stable=True).indices  # a radix sort
            counts = torch.bincount(flat, minlength=table.shape[0])
            bag_weights = weights.reshape(-1).index_select(0, order)
            grad_table = torch.ops.aten._embedding_bag(grad, order // k, counts.cumsum(0) - counts, False, _SUM,
                                                       False, bag_weights, False, -1)[0]  # (R, d)
        if need_loc or need_attn:
            levels, points = attention.shape[1:]
            grad_w = _weight_grad(grad, table, rows).view(n, 2, 2, levels, points).permute(1, 2, 3, 0, 4)
            grad_w = grad_w.contiguous()  # (2 y, 2 x, L, N, P)
            wx, wy = w[0], w[1]  # (2, L, N, P) each
            if need_attn:
                grad_attn = (grad_w * (wy[:, None] * wx[None])).sum((0, 1)).permute(1, 0, 2)  # (N, L, P)
            if need_loc:
                g = grad_w * attention.permute(1, 0, 2)
                slope = inside * torch.tensor([-1.0, 1.0], dtype=g.dtype, device=g.device)[:, None, None, None]
                grad_x = ((g * wy[:, None]).sum(0) * slope[0]).sum(0)  # (L, N, P): d w / d frac
                grad_y = ((g * wx[None]).sum(1) * slope[1]).sum(0)
                grad_loc = (torch.stack([grad_x, grad_y]) * ctx.size).permute(2, 1, 3, 0)  # (N, L, P, 2)
        return grad_table, grad_loc, grad_attn, *nones


def deformable_sample(table: torch.Tensor, locations: torch.Tensor, attention: torch.Tensor,
                      levels: list[tuple[int, int]], tokens: int, queries: int, heads: int) -> torch.Tensor:
    """:func:`~vision_attn.layers.deformable_attention.sample_standard` through ``embedding_bag`` and a
    written-out backward, outside graph capture: (N, d)."""
    if capturing_graph():
        return sample_standard(table, locations, attention, levels, tokens, queries, heads)
    return _DeformableSampling.apply(table, locations, attention, levels, tokens, queries, heads)
