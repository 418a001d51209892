"""torch's optimizers by name: the one table that training (:func:`vision_attn.tasks.optim.build_optimizer`)
and the timed training steps of :mod:`vision_attn.analysis.benchmark` choose from. It depends on torch
alone, so every layer may use it."""
from __future__ import annotations

from typing import Callable

import torch

__all__ = ["OPTIMIZERS"]

OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
"""torch's optimisers by name: what a timed training step can end with (learning rate 1e-4, PyTorch's defaults
otherwise), and what the trainers build (:func:`vision_attn.tasks.optim.build_optimizer`)."""
