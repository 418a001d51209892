"""The Transformer feed-forward network."""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.layers.linear import linear


class Mlp(nn.Module):
    """Linear -> activation -> dropout -> Linear -> dropout, over the last dimension.

    Keys ``fc1`` and ``fc2`` match timm's, so its checkpoints load unchanged. At inference on the CPU
    the linear layers run through oneDNN with bias and GELU fused (:func:`~vision_attn.layers.linear.linear`).
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
        x = self.drop1(linear(x, self.fc1, self.act))  # (..., hidden)
        return self.drop2(linear(x, self.fc2))
