"""Statistics of attention weights, as :func:`vision_attn.layers.record_attention` collects them."""
from __future__ import annotations

import math

import torch

from vision_attn.errors import DataError

__all__ = ["attention_entropy", "uniform_entropy"]


def attention_entropy(weights: torch.Tensor, query: int = 0) -> torch.Tensor:
    """Entropy in nats of the attention distribution of token ``query`` (0: the class token).

    ``weights`` (B, heads, N, N), rows summing to 1 -> (B, heads). Uniform attention over N tokens
    gives ``log N`` (:func:`uniform_entropy`); attention on a single token gives 0.
    """
    if weights.ndim != 4 or weights.shape[-1] != weights.shape[-2]:
        raise DataError(f"expected attention weights of shape (batch, heads, N, N), got {tuple(weights.shape)}")
    if not -weights.shape[-2] <= query < weights.shape[-2]:
        raise DataError(f"query token {query} is out of range for {weights.shape[-2]} tokens")
    return torch.special.entr(weights[..., query, :].float()).sum(dim=-1)


def uniform_entropy(num_tokens: int) -> float:
    """The largest entropy over ``num_tokens`` tokens, ``log N`` nats (uniform attention)."""
    return math.log(num_tokens)
