"""Window attention (Swin, Liu et al. 2021): self-attention inside non-overlapping windows with a
learned relative position bias, and the region mask of shifted windows.

Tokens travel as NHWC maps (B, H, W, C). :func:`window_partition` cuts a map into windows
(B*nW, N, C) with N = wh*ww tokens each, :func:`window_reverse` puts them back. A Swin block does
both, with the cyclic shift and the padding, as one gather each way (:func:`window_index`,
:func:`gather_tokens`): on this project's CPU ``torch.roll`` of a (16, 56, 56, 96) map takes 30 ms,
the gather 4 ms. :class:`ShiftedWindows` builds the gather order and the additive region mask
(nW, N, N) for a map size (kept between calls on the fast path): nothing of it enters the state dict.

:class:`WindowAttention` adds the relative position bias and the region mask into one additive mask
for ``scaled_dot_product_attention``. With token-major windows (B, N, nW, C) the windows fold into
the head dimension, q (B, nW*heads, N, d), as strided views of the qkv projection, so that the
(nW*heads, N, N) mask covers every image and nothing is copied per image.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.layers.attention import attend
from vision_attn.layers.patch_embed import to_2tuple
from vision_attn.layers.tables import Tables

__all__ = [
    "window_partition", "window_reverse", "window_index", "gather_tokens", "relative_position_index", "region_mask",
    "ShiftedWindows", "resample_relative_position_bias", "WindowAttention",
]

MASK_VALUE = -100.0  # what the official code, timm and torchvision add between regions (not -inf)


def window_partition(x: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
    """Map (B, H, W, C) -> windows (B*nW, wh*ww, C), row-major over windows; H, W multiples of the window."""
    B, H, W, C = x.shape
    wh, ww = window
    x = x.view(B, H // wh, wh, W // ww, ww, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(B * (H // wh) * (W // ww), wh * ww, C)  # (B*nW, N, C)


def window_reverse(windows: torch.Tensor, window: tuple[int, int], H: int, W: int) -> torch.Tensor:
    """Windows (B*nW, wh*ww, C) -> map (B, H, W, C): the inverse of :func:`window_partition`."""
    wh, ww = window
    C = windows.shape[-1]
    x = windows.view(-1, H // wh, W // ww, wh, ww, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, H, W, C)  # (B, H, W, C)


def relative_position_index(window: tuple[int, int], device: torch.device | None = None) -> torch.Tensor:
    """(N, N) index into the (2wh-1)*(2ww-1) bias table for each pair of tokens of a window:
    (dy + wh - 1) * (2ww - 1) + (dx + ww - 1), with (dy, dx) the query's offset from the key."""
    wh, ww = window
    ys, xs = torch.meshgrid(torch.arange(wh, device=device), torch.arange(ww, device=device), indexing="ij")
    ys, xs = ys.flatten(), xs.flatten()  # (N,)
    dy = ys[:, None] - ys[None, :] + (wh - 1)  # (N, N) in [0, 2wh-2]
    dx = xs[:, None] - xs[None, :] + (ww - 1)
    return dy * (2 * ww - 1) + dx


def region_mask(size: tuple[int, int], window: tuple[int, int], shift: tuple[int, int],
                device: torch.device | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Additive mask (nW, N, N) for a map of ``size`` (a window multiple) rolled by ``-shift``: 0 between
    tokens of the same region, -100 across regions.

    Along each shifted dimension the map has three regions, split at ``size - window`` and
    ``size - shift`` (the rows that wrapped around come last); a dimension with shift 0 is one region.
    """
    ids = []
    for n, w, s in zip(size, window, shift):
        i = torch.arange(n, device=device)
        ids.append((i >= n - w).long() + (i >= n - s).long() if s else torch.zeros_like(i))  # (n,) in {0, 1, 2}
    region = (ids[0][:, None] * 3 + ids[1][None, :])[None, :, :, None]  # (1, H, W, 1)
    region = window_partition(region, window).squeeze(-1)  # (nW, N)
    diff = region[:, :, None] != region[:, None, :]  # (nW, N, N)
    return torch.zeros(diff.shape, device=device, dtype=dtype).masked_fill_(diff, MASK_VALUE)


def window_index(size: tuple[int, int], window: tuple[int, int], shift: tuple[int, int] = (0, 0),
                 roll_before_pad: bool = True, token_major: bool = False,
                 device: torch.device | None = None) -> torch.Tensor:
    """For a map of ``size`` (H, W) padded to a window multiple (Hp, Wp): the flat index into the
    padded map (Hp*Wp,) of each token in window order (the order of :func:`window_partition`), with
    the cyclic shift by ``-shift`` folded in. Gathering the padded map by it gives the windows of the
    shifted map in one copy; gathering the windows by its inverse puts them back.

    ``roll_before_pad``: the map is rolled over (H, W) and then padded (timm's order), else padded
    and then rolled over (Hp, Wp) (torchvision's). Padding tokens stay where they are in the first case.
    ``token_major``: order (token in window, window) instead, the layout (B, N, nW, C) that
    :class:`WindowAttention` takes without copies.
    """
    H, W = size
    (wh, ww), (sy, sx) = window, shift
    Hp, Wp = H + (wh - H % wh) % wh, W + (ww - W % ww) % ww
    ys = torch.arange(Hp, device=device).view(Hp // wh, 1, wh, 1)  # (nWy, 1, wh, 1): row of each token
    xs = torch.arange(Wp, device=device).view(1, Wp // ww, 1, ww)  # (1, nWx, 1, ww)
    if roll_before_pad:
        src = ((ys + sy) % H) * Wp + (xs + sx) % W
        src = torch.where((ys < H) & (xs < W), src, ys * Wp + xs)  # padding stays padding
    else:
        src = ((ys + sy) % Hp) * Wp + (xs + sx) % Wp
    src = src.reshape(-1, wh * ww)  # (nW, N): (window row, window column) x (row, column in the window)
    return (src.T if token_major else src).flatten()  # (Hp*Wp,)


def gather_tokens(x: torch.Tensor, index: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    """Tokens (B, L, C) reordered by the permutation ``index`` (L,); ``inverse`` undoes it.

    Where a gradient flows, the same tokens are written by ``index_copy`` to the positions ``inverse``,
    whose gradient is the gather by ``inverse`` (one copy). ``index_select``'s gradient is a zero-fill
    and a scatter-add, which Inductor compiles into atomic additions when it runs on several threads."""
    if torch.is_grad_enabled() and x.requires_grad:
        return x.new_empty(x.shape).index_copy(1, inverse, x)
    return x.index_select(1, index)


class ShiftedWindows(Tables):
    """What a stage needs to cut its maps into (shifted) windows, built per map size
    (:class:`~vision_attn.layers.tables.Tables`: kept on the fast path) and shared by a stage's blocks.

    :meth:`index` gives the gather order of :func:`window_index` and its inverse; :meth:`mask` the
    region mask (nW, N, N) of :func:`region_mask`.
    """

    def index(self, size: tuple[int, int], window: tuple[int, int], shift: tuple[int, int], roll_before_pad: bool,
              token_major: bool, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(index, inverse), each (Hp*Wp,): padded map -> windows and back (see :func:`window_index`)."""
        def build():
            index = window_index(size, window, shift, roll_before_pad, token_major, device)
            return index, torch.argsort(index)
        key = ("index", tuple(size), tuple(window), tuple(shift), roll_before_pad, token_major, device)
        return self.get(key, build)

    def mask(self, padded: tuple[int, int], window: tuple[int, int], shift: tuple[int, int],
             device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The region mask (nW, N, N) of a map padded to ``padded``."""
        return self.get(("mask", tuple(padded), tuple(window), tuple(shift), device, dtype),
                        lambda: region_mask(padded, window, shift, device, dtype))


def _interp_matrix(src: int, dst: int) -> torch.Tensor:
    """(dst, src) linear interpolation matrix from ``src`` geometrically spaced offsets to ``dst``
    evenly spaced ones (BEiT's rule for relative position tables, which timm applies to Swin).

    Source offsets are 0, ±1, ±(1+q), ±(1+q+q²), ...: the ratio q (bisected in [1.01, 1.5]) makes the
    outermost offset reach ``dst // 2``, so a table grows without its centre being stretched.
    """
    if src == 1:  # a 1-wide window has one offset: every target takes its value
        return torch.ones(dst, 1, dtype=torch.float64)
    lo, hi = 1.01, 1.5
    while hi - lo > 1e-6:
        q = (lo + hi) / 2
        if (1 - q ** (src // 2)) / (1 - q) > dst // 2:
            hi = q
        else:
            lo = q
    pos, cur = [], 1.0
    for i in range(src // 2):
        pos.append(cur)
        cur += q ** (i + 1)
    coords = torch.tensor([-p for p in reversed(pos)] + [0.0] + pos, dtype=torch.float64)  # (src,)
    target = torch.arange(-(dst // 2), dst // 2 + 1, dtype=torch.float64)  # (dst,)
    j = torch.searchsorted(coords, target).clamp(1, src - 1)  # right neighbour
    t = ((target - coords[j - 1]) / (coords[j] - coords[j - 1])).clamp(0, 1)  # beyond the ends: the end value
    m = torch.zeros(dst, src, dtype=torch.float64)
    rows = torch.arange(dst)
    m[rows, j - 1] = 1 - t
    m[rows, j] += t
    return m


def resample_relative_position_bias(table: torch.Tensor, new_window: tuple[int, int],
                                    old_window: tuple[int, int] | None = None) -> torch.Tensor:
    """Resample a bias table ((2wh-1)*(2ww-1), heads) to ``new_window``.

    The old window is taken as square from the table's length unless given. Each axis is interpolated
    linearly from geometrically spaced source offsets (BEiT's rule, the one timm uses when it loads a
    Swin checkpoint into another window size), so tables resampled here equal timm's.
    """
    new_window = to_2tuple(new_window)
    if old_window is None:
        side = round(((table.shape[0]) ** 0.5 + 1) / 2)
        if (2 * side - 1) ** 2 != table.shape[0]:
            raise ConfigError(f"cannot infer the window of a relative position table of {table.shape[0]} rows: pass old_window")
        old_window = (side, side)
    src = (2 * old_window[0] - 1, 2 * old_window[1] - 1)
    dst = (2 * new_window[0] - 1, 2 * new_window[1] - 1)
    if src == dst:
        return table
    if table.is_meta:
        return table.new_empty(dst[0] * dst[1], table.shape[1])
    heads = table.shape[1]
    grid = table.detach().double().cpu().T.reshape(heads, *src)  # (heads, 2wh-1, 2ww-1)
    my, mx = _interp_matrix(src[0], dst[0]), _interp_matrix(src[1], dst[1])
    out = my @ grid @ mx.T  # (heads, dst_h, dst_w)
    return out.reshape(heads, -1).T.to(table.dtype).to(table.device).contiguous()  # (dst_h*dst_w, heads)


class WindowAttention(nn.Module):
    """Multi-head self-attention inside windows, with a learned relative position bias.

    Takes windows (B*nW, N, C) with N = wh*ww tokens each, or the same tokens token-major,
    (B, N, nW, C), and an optional region mask (nW, N, N) (shifted windows); returns the layout it
    was given. Keys ``qkv``, ``proj`` and ``relative_position_bias_table`` ((2wh-1)*(2ww-1), heads)
    match timm's and the official layout. The pair index into the table is computed (on the fast path kept per
    device), not stored: no buffers.

    Token-major windows cost no copy between the projections and the attention kernel: the rows of
    the qkv weight are taken in (head, q/k/v, channel) order, so q, k and v of all windows and heads
    are strided views (B, nW*heads, N, d) of the projection's output, the layout in which the bias
    and region mask (nW*heads, N, N) broadcast over the batch; the kernel's output is already the
    (B, N, nW, C) the output projection takes. ``sdpa``: as :class:`~vision_attn.layers.attention.Attention`'s.
    """

    sdpa = staticmethod(F.scaled_dot_product_attention)
    keep_weights: bool
    weights: torch.Tensor | None

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window_size: int | tuple[int, int] = 7,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
    ) -> None:
        super().__init__()
        if dim % num_heads:
            raise ConfigError(f"dim {dim} is not divisible by num_heads {num_heads}")
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.window_size = to_2tuple(window_size)
        self._init_position_bias()
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.keep_weights = False
        self.weights = None
        self._index = Tables()  # device -> the pair index into the table

    def _init_position_bias(self) -> None:
        """The learned table ((2wh-1)*(2ww-1), heads) of relative position biases."""
        wh, ww = self.window_size
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * wh - 1) * (2 * ww - 1), self.num_heads))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def _gather_bias(self, table: torch.Tensor) -> torch.Tensor:
        """A table ((2wh-1)*(2ww-1), heads) -> the bias (heads, N, N) of each pair of tokens of a window."""
        device = table.device
        index = self._index.get(device, lambda: relative_position_index(self.window_size, device).flatten(), table)  # (N*N,)
        n = self.window_size[0] * self.window_size[1]
        bias = table[index]  # (N*N, heads)
        # contiguous: the GPU's fused kernels take a mask only with unit stride along its last dimension
        return bias.view(n, n, self.num_heads).permute(2, 0, 1).contiguous()  # (heads, N, N)

    def relative_position_bias(self) -> torch.Tensor:
        """The bias (heads, N, N) gathered from the table."""
        return self._gather_bias(self.relative_position_bias_table)

    def qkv_bias(self) -> torch.Tensor | None:
        """The bias (3C,) of the qkv projection, in (q/k/v, head, d) order."""
        return self.qkv.bias

    def rows_by_head(self, w: torch.Tensor) -> torch.Tensor:
        """The qkv projection's weight (3C, C) or bias (3C, 1) with its rows in (head, q/k/v, d) order
        instead of (q/k/v, head, d)."""
        return w.view(3, self.num_heads, self.head_dim, -1).transpose(0, 1).reshape(3 * self.dim, -1)

    def _qkv_by_head(self, x: torch.Tensor) -> torch.Tensor:
        """The qkv projection of ``x`` (..., C) with its output features in (head, q/k/v, d) order
        instead of the weight's (q/k/v, head, d): (..., 3C)."""
        b = self.qkv_bias()
        return F.linear(x, self.rows_by_head(self.qkv.weight), self.rows_by_head(b[:, None]).flatten() if b is not None else None)

    def attend(self, qkv: torch.Tensor, mask: torch.Tensor,
               dropout_p: float = 0.0) -> tuple[torch.Tensor, torch.Tensor | None]:
        """softmax(q kᵀ/√d + mask) v for q, k, v packed as (B, N, G, 3, d) (G groups: windows x heads)
        and an additive ``mask`` (1, G, N, N) that may need a gradient, as a learned position bias does.
        Returns the output (B, N, G, d) and, with ``keep_weights``, the weights (B, G, N, N)."""
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(3))  # (B, G, N, d) each: strided views
        # one mask per image: torch's kernels differentiate a batch-broadcast mask slowly, and the
        # TorchScript ONNX exporter broadcasts it wrongly
        out, weights = attend(q, k, v, mask.expand(q.shape[0], -1, -1, -1), dropout_p, self.keep_weights, self.sdpa)
        # (B, N, G, d), copied: an exported graph's decomposed kernel returns another memory layout than
        # the kernel's own, which its later reshape would take for a view
        return out.transpose(1, 2).clone(memory_format=torch.contiguous_format), weights

    def scale_qk(self, qkv: torch.Tensor) -> torch.Tensor:
        """Packed (B, N, nW*heads, 3, d) -> what the kernel takes, which divides q kᵀ by √d: as it is here."""
        return qkv

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        # windows (B*nW, N, C): as token-major windows, one window per row if unmasked (torch.fx traces
        # Swin blocks, which give (B, N, nW, C))
        if x.dim() == 3:
            Bw, N, C = x.shape
            if mask is None:
                return self.forward(x.view(Bw, N, 1, C)).view(Bw, N, C)
            nW = mask.shape[0]
            out = self.forward(x.view(Bw // nW, nW, N, C).transpose(1, 2), mask)  # (B, N, nW, C)
            return out.transpose(1, 2).reshape(Bw, N, C)
        B, N, nW, C = x.shape
        h, d = self.num_heads, self.head_dim
        qkv = self.scale_qk(self._qkv_by_head(x).view(B, N, nW * h, 3, d))  # packed: no copy to split heads
        bias = self.relative_position_bias().to(qkv.dtype)  # (heads, N, N)
        if mask is None:
            full = bias.expand(nW, h, N, N) if nW > 1 else bias.unsqueeze(0)
        else:
            full = mask.to(qkv.dtype).unsqueeze(1) + bias  # bias and region mask in one, (nW, heads, N, N)
        full = full.reshape(1, nW * h, N, N)  # broadcasts over the batch
        dropout_p = self.attn_drop if self.training else 0.0
        out, weights = self.attend(qkv, full, dropout_p)  # (B, N, nW*heads, d)
        self.weights = weights.view(B * nW, h, N, N) if weights is not None else None
        x = out.reshape(B, N, nW, C)  # a view of the fused kernel's output
        return self.proj_drop(self.proj(x))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, window_size={self.window_size}, num_heads={self.num_heads}"
