"""timm's model contract, one implementation for every family: feature levels, intermediates,
pruning, gradient checkpointing and the classifier attributes.

A family (ViT, Swin, the torchvision ResNets) inherits :class:`TimmContract` and says how its
levels run, through small hooks:

- ``_begin(x) -> (x, context)``: images to the input of level 0 (the patch embedding; for a ResNet
  nothing), with what every level needs (ViT's rotary tables, its token grid);
- ``_levels() -> list``: the modules of the levels, in order (ViT: blocks; Swin: stages; ResNet: the
  stem, then ``layer1..layer4``); one entry of ``feature_info`` each;
- ``_run_level(i, x, context)``: level ``i``'s forward (gradient checkpointing inside);
- ``_feature_map(i, x, context, norm, output_fmt)``: the level's output as a feature map;
- ``_end(x)``: after the last level, ``forward_features``' output (default: the final ``norm``);
- ``_truncate(last)``: remove what runs after level ``last``; ``_prune_norm()``: drop the final norm
  (default: ``norm`` becomes an identity);
- ``reset_classifier(num_classes)``: a new head (0: none, the model returns pooled features);
  ``_prune_head()`` (default ``reset_classifier(0)``) removes everything after the final norm.

and the mixin gives ``forward_intermediates`` (timm's arguments and meaning), ``level_outputs`` (the
levels' outputs as computed, what timm's hooks on them see),
``prune_intermediate_layers``, ``set_grad_checkpointing``, ``head_hidden_size`` and the
``features_only`` defaults (``default_out_indices``, ``output_fmts``).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from vision_attn.models.features import check_output_fmt, take_indices

__all__ = ["TimmContract", "run_blocks"]


def _checkpointing(module: nn.Module) -> bool:
    return bool(getattr(module, "grad_checkpointing", False)) and torch.is_grad_enabled()


def run_blocks(owner: nn.Module, blocks: Sequence[Callable[..., torch.Tensor]], x: torch.Tensor,
               **kwargs: Any) -> torch.Tensor:
    """``x`` through ``blocks`` in turn; each block's activations are recomputed in the backward
    pass (not kept) when ``owner.grad_checkpointing`` is on and gradients are recorded (not while
    torch.fx traces the model: its graph is the plain one)."""
    if _checkpointing(owner) and not isinstance(x, torch.fx.Proxy):
        for blk in blocks:
            x = checkpoint(blk, x, use_reentrant=False, **kwargs)
    else:
        for blk in blocks:
            x = blk(x, **kwargs)
    return x


def init_trunc_normal(model: nn.Module, std: float = 0.02) -> None:
    """timm's initialisation of convolutions and linear layers: truncated normal weights (``std``),
    zero biases (meta tensors are left as they are)."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)) and not m.weight.is_meta:
            nn.init.trunc_normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class NormPoolClassifier:
    """timm's classifier interface over a :class:`~vision_attn.layers.norm_head.NormPoolHead` kept
    at ``self.head`` (ConvNeXt, Hiera), and the forward through the levels into it."""

    head: nn.Module
    num_classes: int

    @property
    def global_pool(self) -> str:
        return self.head.global_pool

    def get_classifier(self) -> nn.Module:
        return self.head.fc

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A fresh classifier for ``num_classes`` (0: none, the pooled features); as timm's,
        ``global_pool`` ``"avg"`` or ``""`` (the normalised last map or tokens, unpooled) replaces the
        pooling."""
        self.num_classes = num_classes
        self.head.reset(num_classes, global_pool)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) -> the last level's output, before the head: the levels of
        :class:`TimmContract`'s hooks (``_begin``, ``_levels``, ``_run_level``) in turn."""
        x, _ = self._begin(x)  # type: ignore[attr-defined]
        for i in range(len(self._levels())):  # type: ignore[attr-defined]
            x = self._run_level(i, x, None)  # type: ignore[attr-defined]
        return x

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return self.head(x, pre_logits=pre_logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


class TimmContract:
    """The parts of timm's model interface that detection code, feature extractors and timm's data
    helpers call, over the hooks described in the module docstring. Subclasses set
    ``feature_info`` (list of dicts ``num_chs``, ``reduction``, ``module``), ``num_features`` and
    ``num_classes``, and may override the class attributes below."""

    output_fmts: tuple[str, ...] = ("NCHW",)
    """Layouts ``forward_intermediates`` can give; the first is the default."""
    features_only_fmt: str | None = None
    """The layout of ``features_only`` maps when not asked (timm's choice per family; None: the first)."""
    default_out_indices: int | tuple[int, ...] | None = None
    """The levels ``features_only`` returns when not told (None: all)."""
    norm_last_level_only: bool = False
    """The final norm fits the last level only (Swin: its width), so ``norm=True`` leaves the others."""
    grad_checkpointing: bool = False

    feature_info: list[dict[str, Any]]
    num_features: int
    num_classes: int

    @property
    def default_output_fmt(self) -> str:
        return self.features_only_fmt or self.output_fmts[0]

    @property
    def head_hidden_size(self) -> int:
        """Width of the pooled features the classifier reads (``reset_classifier(0)``'s output)."""
        return self.num_features

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block's activations in the backward pass instead of keeping them: the same
        outputs and gradients, less training memory (docs/benchmarks.md), a slower step."""
        for m in self.modules():  # the model and every part that checkpoints its blocks (Swin's stages)
            if hasattr(m, "grad_checkpointing"):
                m.grad_checkpointing = enable

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | Sequence[int] | None = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str | None = None,
        intermediates_only: bool = False,
    ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """Feature maps of the levels ``indices`` (None: all; an int ``n``: the last ``n``; a list:
        those, negative from the end), as timm's ``forward_intermediates``: returns
        ``(forward_features(x), maps)``, or the maps alone with ``intermediates_only``. ``norm``
        applies the final norm to the maps; ``stop_early`` stops after the last level taken (the
        final features are then that level's); ``output_fmt``: one of :attr:`output_fmts`."""
        fmt = check_output_fmt(output_fmt or self.output_fmts[0], self.output_fmts)
        levels = self._levels()
        take, last = take_indices(len(levels), indices)
        maps = []
        for i, x, context in self._walk(x, last + 1 if stop_early else len(levels)):
            if i in take:
                maps.append(self._feature_map(i, x, context, norm, fmt))
        if intermediates_only:
            return maps
        return self._end(x), maps

    def level_outputs(self, x: torch.Tensor, indices: int | Sequence[int] | None = None) -> list[torch.Tensor]:
        """The outputs of the levels ``indices`` (as :meth:`forward_intermediates` counts them) as the
        levels compute them, no level run after the last taken: a ViT block's tokens (B, prefix + h*w, D),
        a Swin stage's (B, H, W, C), a ResNet stage's (B, C, H, W). What timm's forward hooks on the
        ``feature_info`` modules return (``features_only`` with ``feature_cls`` ``"hook"``, ``"fx"``,
        ``"list"`` or ``"dict"``)."""
        take, last = take_indices(len(self._levels()), indices)
        return [y for i, y, _ in self._walk(x, last + 1) if i in take]

    def _walk(self, x: torch.Tensor, count: int):
        """Images through the first ``count`` levels: yields ``(i, level i's output, context)``."""
        x, context = self._begin(x)
        for i in range(count):
            x = self._run_level(i, x, context)
            yield i, x, context

    def prune_intermediate_layers(self, indices: int | Sequence[int] | None = 1, prune_norm: bool = False,
                                  prune_head: bool = True) -> list[int]:
        """Remove what runs after the last level of ``indices``, the final norm (``prune_norm``) and the
        classifier (``prune_head``); returns the absolute indices kept. ``feature_info`` keeps
        describing every level, as timm's does."""
        take, last = take_indices(len(self._levels()), indices)
        self._truncate(last)
        if prune_norm:
            self._prune_norm()
        if prune_head:
            self._prune_head()
        return take

    def _end(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)

    def _prune_norm(self) -> None:
        self.norm = nn.Identity()

    def _prune_head(self) -> None:
        self.reset_classifier(0)
