"""RT-DETR's neck rows: ``AIFI`` (attention-based intra-scale feature interaction) and ``RepC3``.

RT-DETR (Zhao et al. 2023, "DETRs Beat YOLOs on Real-time Object Detection") runs self-attention on
its coarsest map only (stride 32: few tokens, the most semantic features) and fuses the scales with
convolutions. :class:`AIFI` is one post-norm Transformer encoder layer over the H*W positions of a
(B, C, H, W) map, with fixed 2-D sine-cosine positions added to the queries and keys
(:func:`sincos_positions`). :class:`RepC3` is a CSP block whose inner blocks are re-parameterisable
3x3 convolutions (:class:`~vision_attn.models.yolo.conv.RepConv`).

Rows (ultralytics' parser): ``[-1, 1, AIFI, [c_ffn, heads]]`` (the channels come from the input, the
output has as many) and ``[-1, n, RepC3, [c2]]`` (scaled like C3: c2 by width, n by depth, the
repeats inside the block). State-dict keys equal ultralytics' (``ma.in_proj_weight``,
``ma.out_proj.weight``, ``fc1``, ``norm1``; ``cv1``, ``m.0.conv1``, ...): :class:`PackedAttention`
keeps ``nn.MultiheadAttention``'s parameters and computes through ``scaled_dot_product_attention``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.yolo.conv import Conv, RepConv

__all__ = ["AIFI", "PackedAttention", "RepC3", "additive_mask", "sincos_positions"]


def additive_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean attention mask (True: the query may not see the key, ``nn.MultiheadAttention``'s
    convention) as the additive one ``scaled_dot_product_attention`` takes (0 or -inf)."""
    if mask is None:
        return None
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))


class PackedAttention(nn.Module):
    """Multi-head attention with ``nn.MultiheadAttention``'s parameters (``in_proj_weight`` (3D, D) as
    q, k, v rows, ``in_proj_bias``, ``out_proj``), batch first: queries and keys share one input
    (``qk``: the tokens plus their positions), the values another. (B, N, D) -> (B, N, D). ``sdpa``:
    as :class:`~vision_attn.layers.attention.Attention`'s."""

    sdpa = staticmethod(F.scaled_dot_product_attention)

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if dim % num_heads:
            raise ConfigError(f"{dim} channels do not split into {num_heads} attention heads; give a head count "
                              f"that divides {dim}")
        self.num_heads = num_heads
        self.dropout = dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim))
        self.out_proj = nn.Linear(dim, dim)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, qk: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``qk`` and ``value`` (B, N, D); ``mask`` boolean (N, N), True where a query may not attend."""
        b, n, d = value.shape
        h = self.num_heads
        w, bias = self.in_proj_weight, self.in_proj_bias
        q, k = F.linear(qk, w[: 2 * d], bias[: 2 * d]).view(b, n, 2, h, d // h).permute(2, 0, 3, 1, 4)
        v = F.linear(value, w[2 * d:], bias[2 * d:]).view(b, n, h, d // h).transpose(1, 2)  # (B, heads, N, d)
        out = self.sdpa(q, k, v, attn_mask=additive_mask(mask, q.dtype), dropout_p=self.dropout if self.training else 0.0)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, d))  # (B, N, D)


def sincos_positions(h: int, w: int, dim: int, temperature: float = 10000.0, *,
                     device: torch.device | None = None) -> torch.Tensor:
    """RT-DETR's fixed 2-D positions of a row-major h x w grid, (1, h*w, dim) in float32: a quarter of
    the channels each for sin(y w_i), cos(y w_i), sin(x w_i), cos(x w_i) with w_i = T^(-i / (dim/4))."""
    if dim % 4:
        raise ConfigError(f"AIFI's 2-D sine-cosine positions need a channel count divisible by 4, got {dim}")
    quarter = dim // 4
    gy, gx = torch.meshgrid(torch.arange(h, device=device, dtype=torch.float32),
                            torch.arange(w, device=device, dtype=torch.float32), indexing="ij")
    omega = 1.0 / temperature ** (torch.arange(quarter, device=device, dtype=torch.float32) / quarter)  # (dim/4,)
    y = gy.flatten()[:, None] * omega[None]  # (h*w, dim/4)
    x = gx.flatten()[:, None] * omega[None]
    return torch.cat([y.sin(), y.cos(), x.sin(), x.cos()], 1)[None]  # (1, h*w, dim)


class AIFI(nn.Module):
    """One post-norm Transformer encoder layer over a map's positions: x + attention(x + pos, x),
    layer norm, x + fc2(act(fc1(x))), layer norm. (B, c1, H, W) -> (B, c1, H, W). ``act`` defaults to
    GELU; ``normalize_before`` gives the pre-norm form."""

    def __init__(self, c1: int, cm: int = 2048, num_heads: int = 8, dropout: float = 0.0,
                 act: nn.Module | None = None, normalize_before: bool = False) -> None:
        super().__init__()
        if c1 % 4:
            raise ConfigError(f"AIFI's 2-D sine-cosine positions need a channel count divisible by 4, got {c1}")
        self.ma = PackedAttention(c1, num_heads, dropout)
        self.fc1 = nn.Linear(c1, cm)
        self.fc2 = nn.Linear(cm, c1)
        self.norm1 = nn.LayerNorm(c1)
        self.norm2 = nn.LayerNorm(c1)
        self.dropout = nn.Dropout(dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.act = nn.GELU() if act is None else act
        self.normalize_before = normalize_before

    def _ffn(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(self.act(self.fc1(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        pos = sincos_positions(h, w, c, device=x.device).to(x.dtype)  # (1, H*W, C)
        t = x.flatten(2).transpose(1, 2)  # (B, H*W, C)
        if self.normalize_before:
            n = self.norm1(t)
            t = t + self.dropout1(self.ma(n + pos, n))
            t = t + self.dropout2(self._ffn(self.norm2(t)))
        else:
            t = self.norm1(t + self.dropout1(self.ma(t + pos, t)))
            t = self.norm2(t + self.dropout2(self._ffn(t)))
        return t.transpose(1, 2).reshape(b, c, h, w).contiguous()  # (B, C, H, W)


class RepC3(nn.Module):
    """CSP block of RepConvs: cv1 (1x1) then ``n`` :class:`RepConv`, plus cv2 (1x1) of the input; cv3
    (1x1) to c2 unless the hidden width c2*e is c2 already. (B, c1, H, W) -> (B, c2, H, W)."""

    def __init__(self, c1: int, c2: int, n: int = 3, e: float = 1.0) -> None:
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c1, c_, 1, 1)
        self.m = nn.Sequential(*(RepConv(c_, c_) for _ in range(n)))
        self.cv3: nn.Module = Conv(c_, c2, 1, 1) if c_ != c2 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(self.m(self.cv1(x)) + self.cv2(x))

