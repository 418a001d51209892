"""Distribution focal loss (Li et al., Generalized Focal Loss): each box side is a distribution over
``reg_max`` bins; the target distance t between bins i and i+1 asks for mass (i+1-t) on i and (t-i) on i+1."""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["distribution_focal_loss"]


def distribution_focal_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Bin logits (N, 4, reg_max) and target distances (N, 4) in bin units, in [0, reg_max - 1) -> (N,):
    cross-entropy towards the two bins around each target, weighted by closeness, averaged over sides."""
    n, sides, reg_max = logits.shape
    left = target.long().clamp_(0, reg_max - 2)
    w_left = (left + 1).to(target.dtype) - target
    flat = logits.reshape(-1, reg_max).float()
    ce_left = F.cross_entropy(flat, left.reshape(-1), reduction="none").view(n, sides)
    ce_right = F.cross_entropy(flat, (left + 1).reshape(-1), reduction="none").view(n, sides)
    return (ce_left * w_left + ce_right * (1 - w_left)).mean(-1)
