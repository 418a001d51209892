"""Multi-scale deformable attention (Deformable DETR; the cross-attention of RT-DETR's decoder).

Each query attends to a handful of points instead of every token: for each head, level and point a
linear layer of the query predicts a sampling offset around the query's reference point (or box) and
a weight; the softmax of the weights over the levels x points of a head mixes the values bilinearly
sampled at those locations from the flattened multi-scale feature map. Cost is linear in the number
of queries and independent of the feature map's size (only the value projection touches every token).

:func:`multi_scale_deformable_attn` is the sampling and weighted sum: the semantics of ultralytics'
``multi_scale_deformable_attn_pytorch`` (``F.grid_sample``, bilinear, zero padding,
``align_corners=False``, locations in [0, 1]) computed as one ``embedding_bag``: every (query, head)
is a bag of levels x points x 4 corners rows of the value table (B * S * heads, d), each row weighted
by its bilinear weight times the point's attention weight. The value is read where the projection
wrote it (no per-level transpose, no sampled (B * heads, d, Q, L * P) tensor, no final transpose).
The corners and weights feed a gather and a matrix product of standard ops (:func:`sample_standard`),
which every exporter knows; the CPU fast path (``embedding_bag`` with its backward written out) is
put on a model from outside (:func:`vision_attn.kernels.accelerate`) through ``sample``.

:class:`MultiScaleDeformableAttention` is ultralytics' ``MSDeformAttn``: the same arguments, parameter
names, shapes and initialisation, so its state dict loads as it is.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence, Union

import torch
from torch import nn

from vision_attn.errors import ConfigError, DataError

__all__ = ["MultiScaleDeformableAttention", "multi_scale_deformable_attn", "sampling_locations", "sample_standard",
           "corners"]

LevelShapes = Union[Sequence[Sequence[int]], torch.Tensor]
Sampler = Callable[..., torch.Tensor]
"""``sample(table, locations, attention, levels, tokens, queries, heads) -> (N, d)``: :func:`sample_standard`'s signature."""


def _levels(value_shapes: LevelShapes, tokens: int) -> list[tuple[int, int]]:
    """The (H, W) of each level as ints, checked against the value's token count."""
    shapes = value_shapes.tolist() if isinstance(value_shapes, torch.Tensor) else value_shapes
    try:
        levels = [(int(h), int(w)) for h, w in shapes]
    except (TypeError, ValueError):
        raise DataError(f"deformable attention: value_shapes {shapes!r} must be (H, W) pairs, one per level") from None
    if not levels or any(h < 1 or w < 1 for h, w in levels):
        raise DataError(f"deformable attention: value_shapes {levels} must be positive (H, W) pairs, one per level")
    if sum(h * w for h, w in levels) != tokens:
        raise DataError(f"deformable attention: value_shapes {levels} hold {sum(h * w for h, w in levels)} tokens "
                        f"but the value has {tokens}: pass the (H, W) of every level flattened into the value")
    return levels


def corners(locations: torch.Tensor, attention: torch.Tensor, levels: list[tuple[int, int]], tokens: int,
             queries: int, heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The four bilinear neighbours of every sampling location: their table rows and weights.

    ``locations`` (N, L, P, 2) as (x, y) in [0, 1] and ``attention`` (N, L, P), N = B * Q * heads in
    (b, q, head) order. The work runs with the (x, y) and neighbour axes in front, so every
    element-wise step has the long (N, P) axes innermost. Returns ``rows`` (N, K), K = 2 * 2 * L * P
    in (y neighbour, x neighbour, level, point) order: the neighbours' rows of the value table
    (B * S * heads, d), clamped into the level (an outside neighbour has weight 0), int32 where the
    table allows; ``weights`` (N, K): the neighbour's bilinear weight times the point's attention
    weight; ``w`` (2 (x, y), 2 neighbours, L, N, P): the 1-D weights, zero outside the level;
    ``inside`` (2, 2, L, N, P) bool: which 1-D neighbours lie inside; ``size`` (2, L, 1, 1): (W, H)
    of each level. Differentiable in ``locations`` and ``attention``.
    """
    device, dtype = locations.device, locations.dtype
    n, n_levels, points = locations.shape[:3]
    index = torch.int32 if n // max(queries, 1) * tokens < 2 ** 31 else torch.int64  # table rows: B * S * heads
    starts = [0]
    for h, w in levels[:-1]:
        starts.append(starts[-1] + h * w)
    wh = [[w for _, w in levels], [h for h, _ in levels]]  # (2, L)
    size = torch.tensor(wh, dtype=dtype, device=device)[..., None, None]  # (2, L, 1, 1)
    last = torch.tensor(wh, dtype=index, device=device)[..., None, None] - 1  # (2, L, 1, 1): last column, row
    # a row of the table is (b * S + s) * heads + head, with s = start + y * W + x
    stride = torch.tensor([[heads] * n_levels, [w * heads for _, w in levels]], dtype=index,
                          device=device)[..., None, None]  # (2, L, 1, 1)
    start = torch.tensor(starts, dtype=index, device=device)[:, None, None] * heads  # (L, 1, 1)
    bag = torch.arange(n, dtype=index, device=device)
    base = (bag // (queries * heads)) * (tokens * heads) + bag % heads  # (N,)

    pixel = locations.permute(3, 1, 0, 2).contiguous() * size - 0.5  # (2, L, N, P): align_corners=False
    floor = pixel.floor()
    frac = pixel - floor
    first = floor.to(index)
    inside = torch.stack([(first >= 0) & (first <= last), (first >= -1) & (first < last)], 1)  # (2, 2, L, N, P)
    w = torch.stack([1 - frac, frac], 1) * inside  # (2 (x, y), 2 neighbours, L, N, P)
    near = torch.stack([first.clamp(min=0).minimum(last), (first + 1).clamp(min=0).minimum(last)], 1)
    offset = near * stride[:, None]  # (2, 2, L, N, P): steps in table rows
    rows = offset[1][:, None] + (offset[0] + (start + base[:, None]))[None]  # (2 y, 2 x, L, N, P)
    weights = w[1][:, None] * w[0][None] * attention.permute(1, 0, 2)  # (2, 2, L, N, P)
    k = 4 * n_levels * points  # (-1: the batch stays dynamic in a traced graph)
    rows = rows.permute(3, 0, 1, 2, 4).reshape(-1, k)  # (N, K): each bag's rows together
    weights = weights.permute(3, 0, 1, 2, 4).reshape(-1, k)
    return rows, weights, w, inside, size


def sample_standard(table: torch.Tensor, locations: torch.Tensor, attention: torch.Tensor,
                    levels: list[tuple[int, int]], tokens: int, queries: int, heads: int) -> torch.Tensor:
    """The weighted sum of every bag's rows of the value table (R, d) from standard ops (a gather, then a
    matrix product), for ``locations`` (N, L, P, 2) and ``attention`` (N, L, P): (N, d)."""
    rows, weights, _, _, _ = corners(locations, attention, levels, tokens, queries, heads)
    picked = table[rows.long()]  # (N, K, d); ONNX's GatherND takes int64 indices only
    return torch.matmul(weights[:, None, :], picked).squeeze(1)  # (N, d)


def multi_scale_deformable_attn(value: torch.Tensor, value_shapes: LevelShapes, sampling_locations: torch.Tensor,
                                attention_weights: torch.Tensor, sample: Sampler = sample_standard) -> torch.Tensor:
    """Bilinear samples of every level's value at the given locations, summed with the attention weights.

    ``value`` (B, S, heads, d): the levels' (H_l, W_l) maps flattened row-major and concatenated, S =
    sum H_l * W_l; ``value_shapes`` the (H_l, W_l), a list or an (L, 2) tensor;
    ``sampling_locations`` (B, Q, heads, L, P, 2) as (x, y) in [0, 1] (outside reads zeros), or
    (B, Q, heads, L * P, 2) as ultralytics folds it; ``attention_weights`` (B, Q, heads, L, P) or
    (B, Q, heads, L * P). Returns (B, Q, heads * d). Equals ultralytics'
    ``multi_scale_deformable_attn_pytorch`` (``grid_sample``, bilinear, zero padding,
    ``align_corners=False``), gradients included.
    """
    if value.dim() != 4:
        raise DataError(f"deformable attention: value of shape {tuple(value.shape)} must be (B, S, heads, d)")
    batch, tokens, heads, dim = value.shape
    levels = _levels(value_shapes, tokens)
    n_levels = len(levels)
    loc_shape, attn_shape = tuple(sampling_locations.shape), tuple(attention_weights.shape)
    if sampling_locations.dim() == 5 and loc_shape[-1] == 2 and loc_shape[3] % n_levels == 0:
        points = loc_shape[3] // n_levels
    elif sampling_locations.dim() == 6 and loc_shape[-1] == 2 and loc_shape[3] == n_levels:
        points = loc_shape[4]
    else:
        raise DataError(f"deformable attention: sampling_locations of shape {loc_shape} must be "
                        f"(B, Q, heads, {n_levels}, points, 2) or (B, Q, heads, {n_levels} * points, 2)")
    queries = loc_shape[1]
    if loc_shape[0] != batch or loc_shape[2] != heads:
        raise DataError(f"deformable attention: sampling_locations {loc_shape} do not fit the value "
                        f"{tuple(value.shape)}: batch and heads must be equal")
    if attention_weights.numel() != batch * queries * heads * n_levels * points or attn_shape[:3] != loc_shape[:3]:
        raise DataError(f"deformable attention: attention_weights of shape {attn_shape} must be "
                        f"({batch}, {queries}, {heads}, {n_levels}, {points}) to match the sampling locations")
    # one dtype for the three (bf16 autocast leaves the value in bfloat16, the softmax's weights in float32:
    # computed in float32, as autocast runs grid_sample)
    dtype = torch.promote_types(torch.promote_types(value.dtype, sampling_locations.dtype), attention_weights.dtype)
    value, sampling_locations, attention_weights = (t.to(dtype) for t in (value, sampling_locations, attention_weights))
    # -1 for the batch: a traced graph (ONNX) keeps it dynamic
    table = value.reshape(-1, dim)  # (B * S * heads, d): a view of a contiguous value
    locations = sampling_locations.reshape(-1, n_levels, points, 2)  # (N, L, P, 2), N = B * Q * heads
    attention = attention_weights.reshape(-1, n_levels, points)  # (N, L, P)
    out = sample(table, locations, attention, levels, tokens, queries, heads)  # (N, d)
    return out.view(-1, queries, heads * dim)  # (B, Q, heads * d)


def sampling_locations(refer_bbox: torch.Tensor, offsets: torch.Tensor, value_shapes: LevelShapes) -> torch.Tensor:
    """Where each head samples: reference points moved by ``offsets``, as ultralytics' ``MSDeformAttn``.

    ``refer_bbox`` (B, Q, 1 or L, 2) points (x, y), offsets in pixels of each level; or (B, Q, 1 or L,
    4) boxes (cx, cy, w, h), offsets in units of the box: ``offset / points * wh / 2``. ``offsets``
    (B, Q, heads, L, P, 2). Returns (B, Q, heads, L, P, 2).
    """
    coords = refer_bbox.shape[-1]
    if refer_bbox.dim() != 4 or coords not in (2, 4):
        raise DataError(f"deformable attention: refer_bbox of shape {tuple(refer_bbox.shape)} must be "
                        "(B, Q, 1 or levels, 2) points or (B, Q, 1 or levels, 4) boxes")
    ref = refer_bbox[:, :, None, :, None, :]  # (B, Q, 1, 1 or L, 1, 2 or 4)
    if coords == 2:
        shapes = value_shapes.tolist() if isinstance(value_shapes, torch.Tensor) else value_shapes
        wh = torch.tensor([[w, h] for h, w in shapes], dtype=offsets.dtype, device=offsets.device)  # (L, 2)
        return ref + offsets / wh[:, None, :]
    return ref[..., :2] + offsets / offsets.shape[-2] * ref[..., 2:] * 0.5


torch.fx.wrap("multi_scale_deformable_attn")  # torch.fx: leaf calls, as sdpa (they read shapes as ints)
torch.fx.wrap("sampling_locations")


class MultiScaleDeformableAttention(nn.Module):
    """Ultralytics' ``MSDeformAttn``: queries (B, Q, d_model) attend to ``n_points`` locations per
    head and level of the value (B, S, d_model) around their reference points or boxes.

    Parameters ``sampling_offsets`` (d_model -> heads * levels * points * 2), ``attention_weights``
    (d_model -> heads * levels * points), ``value_proj`` and ``output_proj`` (d_model -> d_model), with
    ultralytics' initialisation: zero offset weights and a bias that puts point i of each head at
    distance i + 1 along the head's direction (angles 2 pi h / heads, scaled to the unit square's
    border), uniform attention (zeros), Xavier value and output projections with zero biases.
    ``sample``: the weighted sum of sampled values (:func:`sample_standard`'s signature).
    """

    sample = staticmethod(sample_standard)

    def __init__(self, d_model: int = 256, n_levels: int = 4, n_heads: int = 8, n_points: int = 4) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ConfigError(f"deformable attention: d_model {d_model} is not divisible by n_heads {n_heads}")
        if min(d_model, n_levels, n_heads, n_points) < 1:
            raise ConfigError(f"deformable attention: d_model {d_model}, n_levels {n_levels}, n_heads {n_heads} "
                              f"and n_points {n_points} must all be at least 1")
        self.d_model, self.n_levels, self.n_heads, self.n_points = d_model, n_levels, n_heads, n_points
        self.head_dim = d_model // n_heads
        samples = n_heads * n_levels * n_points
        self.sampling_offsets = nn.Linear(d_model, samples * 2)
        self.attention_weights = nn.Linear(d_model, samples)
        self.value_proj = nn.Linear(d_model, d_model)
        self.output_proj = nn.Linear(d_model, d_model)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Ultralytics' (and Deformable DETR's) initialisation."""
        angles = torch.arange(self.n_heads, dtype=torch.float32) * (2.0 * math.pi / self.n_heads)
        direction = torch.stack([angles.cos(), angles.sin()], -1)  # (heads, 2)
        direction = direction / direction.abs().amax(-1, keepdim=True)  # onto the square's border
        reach = torch.arange(1, self.n_points + 1, dtype=torch.float32)  # point i at distance i + 1
        grid = direction[:, None, None, :] * reach[None, None, :, None]  # (heads, 1, P, 2)
        grid = grid.expand(self.n_heads, self.n_levels, self.n_points, 2)  # (heads, L, P, 2)
        with torch.no_grad():
            nn.init.zeros_(self.sampling_offsets.weight)
            self.sampling_offsets.bias.copy_(grid.reshape(-1))
            nn.init.zeros_(self.attention_weights.weight)
            nn.init.zeros_(self.attention_weights.bias)
            for proj in (self.value_proj, self.output_proj):
                nn.init.xavier_uniform_(proj.weight)
                nn.init.zeros_(proj.bias)

    def forward(self, query: torch.Tensor, refer_bbox: torch.Tensor, value: torch.Tensor,
                value_shapes: LevelShapes, value_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``query`` (B, Q, d_model); ``refer_bbox`` (B, Q, 1 or levels, 2) points or (..., 4) boxes
        (cx, cy, w, h) in [0, 1]; ``value`` (B, S, d_model), the levels flattened; ``value_shapes`` the
        levels' (H, W); ``value_mask`` (B, S), True at padding (those values read as zero).
        Returns (B, Q, d_model)."""
        value = self.value_proj(value)  # (B, S, D)
        if value_mask is not None:
            value = value.masked_fill(value_mask[..., None], 0.0)
        value = value.unflatten(-1, (self.n_heads, self.head_dim))  # (B, S, heads, d)
        heads, levels, points = self.n_heads, self.n_levels, self.n_points
        offsets = self.sampling_offsets(query).unflatten(-1, (heads, levels, points, 2))  # (B, Q, heads, L, P, 2)
        weights = self.attention_weights(query).unflatten(-1, (heads, levels * points))  # (B, Q, heads, L*P)
        weights = weights.softmax(-1)  # over the levels and points of a head
        locations = sampling_locations(refer_bbox, offsets, value_shapes)  # (B, Q, heads, L, P, 2)
        sample = () if self.sample is sample_standard else (self.sample,)  # torch.fx passes no function to a leaf call
        out = multi_scale_deformable_attn(value, value_shapes, locations, weights.unflatten(-1, (levels, points)), *sample)
        return self.output_proj(out)  # (B, Q, D)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_levels={self.n_levels}, n_heads={self.n_heads}, n_points={self.n_points}"
