"""Scaled cosine window attention with a continuous position bias (Swin V2, Liu et al. 2022).

Inside each window, softmax(τ_h · cos(q, k) + B) v, where τ_h = exp(min(s_h, log 100)) is a learned
per-head logit scale (clamped, as in the paper, so that it never exceeds 100) and the bias
B = 16 · sigmoid(MLP(Δ̂)) comes from a small MLP (2 -> 512 -> heads, ReLU) over log-spaced relative
coordinates Δ̂ = sign(Δ) · log2(1 + 8|Δ| / (w_pre - 1)) / 3, normalised by the window size of
pre-training (``pretrained_window_size``; the model's own window when 0), so that a model fine-tuned
at a larger window extrapolates the bias smoothly.

timm, the official code and torchvision compute this explicitly, (N, N) weights included. Here it runs
on the same single fused ``scaled_dot_product_attention`` call as Swin V1
(:class:`~vision_attn.layers.window_attention.WindowAttention`): q and k are L2-normalised, τ_h·√d is
folded into q (the kernel divides by √d), and the bias and the shifted-window mask are one additive mask.

Keys: ``qkv.weight`` (no bias), ``q_bias``, ``v_bias`` (the key has no bias), ``logit_scale`` (heads, 1, 1),
``cpb_mlp.0``, ``cpb_mlp.2``, ``proj`` (timm's and the official layout).
:class:`TorchvisionCosineWindowAttention` keeps torchvision's single ``qkv.bias`` (3C) instead, whose
key third is never used (torchvision zeroes it in every forward pass), so its parameter count is
torchvision's. The coordinate table and the pair index are computed (kept on the fast path), never stored.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.layers.patch_embed import to_2tuple
from vision_attn.layers.tables import Tables
from vision_attn.layers.window_attention import WindowAttention

__all__ = ["CosineWindowAttention", "TorchvisionCosineWindowAttention", "log_spaced_coords", "LOGIT_SCALE_MAX"]

LOGIT_SCALE_MAX = math.log(100.0)  # the clamp on the logit scale: τ <= 100
CPB_HIDDEN = 512


def log_spaced_coords(window: tuple[int, int], pretrained_window: tuple[int, int] = (0, 0),
                      device: torch.device | None = None) -> torch.Tensor:
    """((2wh-1)*(2ww-1), 2) relative offsets (dy, dx) of a window, row-major like the bias table,
    each scaled to [-8, 8] by the (pre-training) window and mapped to sign(t) · log2(1 + |t|) / 3."""
    scale = [max((p if p > 0 else w) - 1, 1) for w, p in zip(window, pretrained_window)]  # a 1-wide window: 0 / 1
    dy = torch.arange(-(window[0] - 1), window[0], device=device, dtype=torch.float32) / scale[0]
    dx = torch.arange(-(window[1] - 1), window[1], device=device, dtype=torch.float32) / scale[1]
    t = torch.stack(torch.meshgrid(dy, dx, indexing="ij"), dim=-1).reshape(-1, 2) * 8  # (T, 2) in [-8, 8]
    return torch.sign(t) * torch.log2(t.abs() + 1.0) / math.log2(8)


class CosineWindowAttention(WindowAttention):
    """Swin V2 window attention: scaled cosine similarity plus a continuous position bias.

    Takes and returns what :class:`~vision_attn.layers.window_attention.WindowAttention` does: windows
    (B*nW, N, C) or token-major windows (B, N, nW, C), and an optional region mask (nW, N, N).
    ``pretrained_window_size``: the window the bias MLP was trained at (0: this window).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window_size: int | tuple[int, int] = 8,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        pretrained_window_size: int | tuple[int, int] = 0,
    ) -> None:
        super().__init__(dim, num_heads, window_size, qkv_bias=False, attn_drop=attn_drop, proj_drop=proj_drop)
        self.pretrained_window_size = to_2tuple(pretrained_window_size)
        self._init_qkv_bias(qkv_bias)
        self._coords = Tables()  # device -> the offsets the bias MLP takes

    def _init_position_bias(self) -> None:
        self.logit_scale = nn.Parameter(torch.full((self.num_heads, 1, 1), math.log(10.0)))
        self.cpb_mlp = nn.Sequential(nn.Linear(2, CPB_HIDDEN), nn.ReLU(inplace=True),
                                     nn.Linear(CPB_HIDDEN, self.num_heads, bias=False))

    def _init_qkv_bias(self, qkv_bias: bool) -> None:
        """Separate query and value biases; the key gets none."""
        self.q_bias = nn.Parameter(torch.zeros(self.dim)) if qkv_bias else None
        self.v_bias = nn.Parameter(torch.zeros(self.dim)) if qkv_bias else None

    def qkv_bias(self) -> torch.Tensor | None:
        if self.q_bias is None:
            return None
        return torch.cat([self.q_bias, torch.zeros_like(self.q_bias), self.v_bias])

    def relative_position_bias(self) -> torch.Tensor:
        """16 · sigmoid(MLP(log-spaced offsets)) gathered per pair of tokens: (heads, N, N)."""
        return self._continuous_bias()

    def _continuous_bias(self) -> torch.Tensor:
        device = self.logit_scale.device
        coords = self._coords.get(device, lambda: log_spaced_coords(self.window_size, self.pretrained_window_size, device),
                                  self.logit_scale)
        table = self.cpb_mlp(coords.to(self.logit_scale.dtype))  # (T, heads)
        return 16 * torch.sigmoid(self._gather_bias(table))

    def logit_scales(self) -> torch.Tensor:
        """τ_h = exp(min(s_h, log 100)), (heads,)."""
        return torch.clamp(self.logit_scale, max=LOGIT_SCALE_MAX).exp().flatten()

    def scale_qk(self, qkv: torch.Tensor) -> torch.Tensor:
        """Packed (B, N, nW*heads, 3, d): q and k normalised, q times τ_h·√d, so that the kernel's
        q kᵀ/√d is τ_h · cos(q, k); one new packed tensor."""
        B, N, G, _, d = qkv.shape
        qkv = qkv.view(B, N, G // self.num_heads, self.num_heads, 3, d)
        qk = F.normalize(qkv[..., :2, :], dim=-1) * self.qk_factors(qkv)[..., None]  # (B, N, nW, heads, 2, d)
        return torch.cat([qk, qkv[..., 2:, :]], dim=-2).view(B, N, G, 3, d)

    def qk_factors(self, qkv: torch.Tensor) -> torch.Tensor:
        """What the normalised q and k of each head are multiplied by, (heads, 2): τ_h·√d and 1."""
        return torch.stack([self.logit_scales().to(qkv.dtype) * qkv.shape[-1] ** 0.5,
                            qkv.new_ones(self.num_heads)], dim=1)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, pretrained_window_size={self.pretrained_window_size}"


class TorchvisionCosineWindowAttention(CosineWindowAttention):
    """:class:`CosineWindowAttention` with torchvision's keys: one ``qkv.bias`` (3C) whose key third
    is held but never used, as in ``torchvision.models.swin_v2_*``."""

    def _init_qkv_bias(self, qkv_bias: bool) -> None:
        if qkv_bias:
            self.qkv.bias = nn.Parameter(torch.zeros(3 * self.dim))

    def qkv_bias(self) -> torch.Tensor | None:
        b = self.qkv.bias
        if b is None:
            return None
        C = self.dim
        return torch.cat([b[:C], torch.zeros_like(b[C:2 * C]), b[2 * C:]])
