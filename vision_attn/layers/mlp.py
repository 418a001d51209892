"""The Transformer feed-forward networks: the plain MLP and its gated (SwiGLU) forms."""
from __future__ import annotations

import functools
import math

import torch
from torch import nn

from vision_attn.errors import ConfigError


class Mlp(nn.Module):
    """Linear -> activation -> dropout -> Linear -> dropout, over the last dimension.

    Keys ``fc1`` and ``fc2`` match timm's, so its checkpoints load unchanged.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int | None = None,
        out_features: int | None = None,
        act_layer: type[nn.Module] = nn.GELU,
        drop: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        hidden_features = hidden_features or in_features
        out_features = out_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, out_features, bias=bias)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.drop1(self.act(self.fc1(x)))  # (..., hidden)
        return self.drop2(self.fc2(x))


class SwiGLU(Mlp):
    """Gated feed-forward network (Shazeer 2020), as in DINOv2's giant model: ``fc1`` projects to
    ``hidden_features`` = two halves (gate, value), the block computes act(gate) * value and ``fc2``
    projects the half width back; (..., in) -> (..., out).

    Keys ``fc1`` (the packed ``w12`` of the official DINOv2 code, gate rows first) and ``fc2`` (its
    ``w3``), timm's ``SwiGLUPacked`` layout. The activation defaults to SiLU; the block's GELU
    default is not passed in unless the model says so.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int | None = None,
        out_features: int | None = None,
        act_layer: type[nn.Module] = nn.SiLU,
        drop: float = 0.0,
        bias: bool = True,
    ) -> None:
        hidden_features = hidden_features or 2 * in_features
        if hidden_features % 2:
            raise ConfigError(f"SwiGLU needs an even hidden width (gate and value halves), got {hidden_features}")
        super().__init__(in_features, hidden_features, out_features, act_layer=act_layer, drop=drop, bias=bias)
        self.fc2 = nn.Linear(hidden_features // 2, out_features or in_features, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = self.fc1(x).chunk(2, dim=-1)  # (..., hidden/2) each
        x = self.drop1(self.act(gate) * value)
        return self.drop2(self.fc2(x))


class SwiGLUNorm(nn.Module):
    """SwiGLU with a norm over the hidden width before the output projection (EVA-02's sub-LN,
    timm's ``SwiGLU`` with ``norm_layer``): act(fc1_g(x)) * fc1_x(x) -> dropout -> norm -> fc2.
    Keys ``fc1_g``, ``fc1_x``, ``norm``, ``fc2`` (timm's); ``hidden_features`` is each branch's width.
    ``norm_layer=None``: no norm (timm's ``SwiGLU`` without one, DINOv3's "plus" models)."""

    def __init__(
        self,
        in_features: int,
        hidden_features: int | None = None,
        out_features: int | None = None,
        act_layer: type[nn.Module] = nn.SiLU,
        drop: float = 0.0,
        bias: bool = True,
        norm_layer: type[nn.Module] | None = functools.partial(nn.LayerNorm, eps=1e-6),
    ) -> None:
        super().__init__()
        hidden_features = hidden_features or in_features
        self.fc1_g = nn.Linear(in_features, hidden_features, bias=bias)
        self.fc1_x = nn.Linear(in_features, hidden_features, bias=bias)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.norm = norm_layer(hidden_features) if norm_layer is not None else nn.Identity()
        self.fc2 = nn.Linear(hidden_features, out_features or in_features, bias=bias)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.drop1(self.act(self.fc1_g(x)) * self.fc1_x(x))  # (..., hidden)
        return self.drop2(self.fc2(self.norm(x)))


def mlp_ratio_for(hidden: int, dim: int) -> float:
    """The ratio whose ``int(dim * ratio)`` (what a block computes) is ``hidden``."""
    ratio = hidden / dim
    while int(dim * ratio) < hidden:
        ratio = math.nextafter(ratio, math.inf)
    assert int(dim * ratio) == hidden, (hidden, dim, ratio)
    return ratio


class SwiGLUSplit(SwiGLUNorm):
    """SwiGLU with separate gate and value projections and no sub-LN: act(fc1_g(x)) * fc1_x(x) -> fc2
    (timm's ``SwiGLU`` without a norm, DINOv3's "plus" and 7B models; transformers' gated MLP
    ``gate_proj``, ``up_proj``, ``down_proj``). Keys ``fc1_g``, ``fc1_x``, ``fc2``."""

    def __init__(self, in_features: int, hidden_features: int | None = None, out_features: int | None = None,
                 act_layer: type[nn.Module] = nn.SiLU, drop: float = 0.0, bias: bool = True) -> None:
        super().__init__(in_features, hidden_features, out_features, act_layer=act_layer, drop=drop, bias=bias,
                         norm_layer=None)


FFN_LAYERS: dict[str, type[nn.Module]] = {"mlp": Mlp, "swiglu": SwiGLU, "swiglu_norm": SwiGLUNorm,
                                          "swiglu_split": SwiGLUSplit}
"""Feed-forward networks by name (``ffn_layer="swiglu"``), so that a run records its model as plain data."""
