"""Activations that models name and torch lacks (OpenAI CLIP's quick GELU), and the table of
activations by name that model constructors accept."""
from __future__ import annotations

import functools

import torch
from torch import nn

__all__ = ["QuickGELU", "ACT_LAYERS"]


class QuickGELU(nn.Module):
    """``x * sigmoid(1.702 x)``, the sigmoid approximation of GELU that OpenAI's CLIP was trained
    with (and its quickgelu descendants in open_clip, timm and transformers' ``hidden_act="quick_gelu"``);
    element-wise, any shape."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


ACT_LAYERS: dict[str, type[nn.Module] | functools.partial] = {
    "gelu": nn.GELU,
    "gelu_tanh": functools.partial(nn.GELU, approximate="tanh"),
    "quick_gelu": QuickGELU,
    "silu": nn.SiLU,
    "relu": nn.ReLU,
}
"""Activations by name (``act_layer="quick_gelu"``): each entry builds the module with no arguments."""
