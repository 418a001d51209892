"""Token merging (ToMe, Bolya et al., ICLR 2023): a ViT block that merges its ``r`` most similar
pairs of tokens after attention, so that every later block runs on fewer tokens.

Between attention and the MLP, the tokens after the ``protected`` prefix (class, distillation and
register tokens, never merged) are split in two alternating sets A and B; each token of A is matched
to its most similar token of B (cosine similarity of the attention's keys, averaged over heads), and
the ``r`` best-matched tokens of A are merged into their partners as a size-weighted mean. A merged
token remembers how many patches it stands for (its *size*); attention adds ``log(size)`` to the
scores of each key (proportional attention), and an average pool weighs by size. With ``r=0`` the
block is :class:`~vision_attn.layers.block.Block` exactly.

The sizes travel beside the tokens in a :class:`TokenSizes` shared by the model's blocks: the model
resets it at the start of each forward pass.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from vision_attn.layers.attention import Attention
from vision_attn.layers.block import Block

__all__ = ["TokenSizes", "MergingAttention", "MergingBlock", "bipartite_matching", "merge_tokens"]


class TokenSizes:
    """How many patches each token stands for, (B, N, 1), or None while no block has merged."""

    def __init__(self) -> None:
        self.size: torch.Tensor | None = None

    def reset(self) -> None:
        self.size = None


def bipartite_matching(metric: torch.Tensor, r: int) -> torch.Tensor:
    """Where each of the tokens (B, N, C) goes when the ``r`` tokens of set A (even positions) most
    similar to a token of set B (odd positions) are merged into it: (B, N) indices into N - r slots,
    A's other tokens first (in their order), then B's tokens."""
    metric = F.normalize(metric, dim=-1)
    a, b = metric[:, ::2], metric[:, 1::2]
    best, partner = (a @ b.transpose(-1, -2)).max(dim=-1)  # (B, |A|): each A token's best match in B
    order = best.argsort(dim=-1, descending=True)
    merged, kept = order[:, :r], order[:, r:].sort(dim=-1).values  # kept tokens stay in their order
    B, N = metric.shape[:2]
    n_kept = a.shape[1] - r
    slots = torch.arange(N, device=metric.device).expand(B, N)
    dest_a = torch.empty_like(best, dtype=torch.long)
    dest_a.scatter_(1, kept, slots[:, :n_kept])
    dest_a.scatter_(1, merged, n_kept + partner.gather(1, merged))
    dest = torch.empty_like(slots)
    dest[:, ::2], dest[:, 1::2] = dest_a, n_kept + slots[:, : b.shape[1]]
    return dest


def merge_tokens(x: torch.Tensor, dest: torch.Tensor, slots: int) -> torch.Tensor:
    """Tokens (B, N, C) summed into ``slots`` tokens (B, slots, C) by their destinations ``dest`` (B, N)
    (a sum: weigh by size before, divide by the merged size after)."""
    out = x.new_zeros(x.shape[0], slots, x.shape[-1])
    return out.scatter_add_(1, dest[..., None].expand(-1, -1, x.shape[-1]), x)


class MergingAttention(Attention):
    """:class:`~vision_attn.layers.attention.Attention` over merged tokens: ``log(size)`` added to the
    scores of each key; :meth:`attend_merged` also returns the keys averaged over heads, the metric
    tokens are matched by."""

    def attend_merged(self, x: torch.Tensor, size: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens (B, N, D) and sizes (B, N, 1) or None -> (output (B, N, D), keys (B, N, d))."""
        q, k, v = self.heads(x)  # (B, heads, N, d)
        bias = size.log().transpose(1, 2)[:, None] if size is not None else None  # (B, 1, 1, N)
        x = self.sdpa(q, k, v, attn_mask=bias, dropout_p=self.attn_drop if self.training else 0.0)
        return self.project(x), k.mean(dim=1)


class MergingBlock(Block):
    """A pre-norm :class:`~vision_attn.layers.block.Block` that merges ``r`` pairs of tokens after its
    attention (fewer where fewer than ``2 r`` unprotected tokens are left); the first ``protected``
    tokens are never merged. ``sizes`` is the model's :class:`TokenSizes`."""

    def __init__(self, dim: int, num_heads: int, *, r: int, protected: int, sizes: TokenSizes,
                 **kwargs: Any) -> None:
        super().__init__(dim, num_heads, **{**kwargs, "attn_class": MergingAttention})
        self.r, self.protected, self.sizes = r, protected, sizes

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        size = self.sizes.size
        h, keys = self.attn.attend_merged(self.norm1(x), size)
        x = x + self.drop_path1(self.ls1(h))
        r = min(self.r, (x.shape[1] - self.protected) // 2)
        if r > 0:
            x, self.sizes.size = self._merge(x, keys, size, r)
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))

    def _merge(self, x: torch.Tensor, keys: torch.Tensor, size: torch.Tensor | None,
               r: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens (B, N, D) -> (B, N - r, D) as size-weighted means, and their sizes (B, N - r, 1)."""
        p = self.protected
        B, N, _ = x.shape
        dest = bipartite_matching(keys[:, p:], r) + p  # (B, N - p): the prefix keeps its slots 0..p-1
        dest = torch.cat([torch.arange(p, device=x.device).expand(B, p), dest], dim=1)  # (B, N)
        if size is None:
            size = x.new_ones(B, N, 1)
        else:
            x = x * size
        merged_size = merge_tokens(size, dest, N - r)  # (B, N - r, 1)
        return merge_tokens(x, dest, N - r).div_(merged_size), merged_size
