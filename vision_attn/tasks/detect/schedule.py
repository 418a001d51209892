"""YOLO-style learning-rate and momentum schedule, set on the optimizer before every step.

Warmup over ``max(warmup_epochs * steps_per_epoch, min_warmup_steps)`` steps: biases fall from
``warmup_bias_lr`` and the other groups rise from 0 to the scheduled rate, while the momentum (SGD's,
AdamW's beta1) rises from ``warmup_momentum``. The scheduled rate decays over the whole run from ``lr``
to ``lr * lrf``, linearly or along a half cosine. A group's ``lr_scale`` (e.g. a backbone's lower
rate) multiplies its rate throughout. It depends only on the step, so a resumed run continues where it
stopped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

__all__ = ["WarmupDecay"]


@dataclass(frozen=True)
class WarmupDecay:
    """The schedule; :meth:`apply` sets each param group's ``lr`` and momentum for an optimizer step."""

    lr: float
    lrf: float
    total_steps: int
    warmup_steps: int
    momentum: float
    warmup_momentum: float
    warmup_bias_lr: float
    shape: Literal["linear", "cosine"] = "linear"

    def factor(self, step: int) -> float:
        """The decay factor in [lrf, 1] at ``step``."""
        frac = min(max(step / max(self.total_steps, 1), 0.0), 1.0)
        if self.shape == "cosine":
            return self.lrf + (1 - self.lrf) * 0.5 * (1 + math.cos(math.pi * frac))
        return (1 - frac) * (1 - self.lrf) + self.lrf

    def values(self, step: int, bias: bool) -> tuple[float, float]:
        """(learning rate, momentum) of a group at ``step``."""
        target = self.lr * self.factor(step)
        if step >= self.warmup_steps:
            return target, self.momentum
        t = step / self.warmup_steps
        start = self.warmup_bias_lr if bias else 0.0
        return start + t * (target - start), self.warmup_momentum + t * (self.momentum - self.warmup_momentum)

    def apply(self, optimizer: torch.optim.Optimizer, step: int) -> float:
        """Set every group's rate and momentum for ``step``; return the rate of the weights."""
        rate = self.lr
        for group in optimizer.param_groups:
            lr, momentum = self.values(step, group.get("kind") == "bias")
            group["lr"] = lr * group.get("lr_scale", 1.0)
            if "betas" in group:
                group["betas"] = (momentum, group["betas"][1])
            elif "momentum" in group:
                group["momentum"] = momentum
            if group.get("kind") == "weight" and "lr_scale" not in group:
                rate = lr
        return rate
