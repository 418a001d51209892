"""Start an inserted block as the exact identity, so a pretrained network is unchanged before training."""
from __future__ import annotations

import torch
from torch import nn


class IdentityBlend(nn.Module):
    """``x + scale * (block(x) - x)``: a learned blend between the identity and ``block``.

    ``scale`` is one learnable scalar, 0 at the start, so the module first returns ``x`` exactly
    (in any dtype), whatever the block computes. Training moves ``scale``, and the block starts to
    learn as soon as ``scale`` leaves 0 (after the first step), as in ReZero (Bachlechner et al.
    2020). At ``scale = 1`` it is the block alone. A sigmoid gate cannot reach 1, which is why the
    blocks themselves cannot start as the identity. Shapes: those of ``block``; keys ``block.*`` and
    ``scale``.
    """

    def __init__(self, block: nn.Module, init: float = 0.0) -> None:
        super().__init__()
        self.block = block
        self.scale = nn.Parameter(torch.tensor(float(init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.scale * (self.block(x) - x)

    def extra_repr(self) -> str:
        return f"scale={self.scale.item():.4g}" if self.scale.device.type != "meta" else "scale=(meta)"
