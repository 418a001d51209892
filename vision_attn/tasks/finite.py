"""Stop training at the first loss that is NaN or infinite, on every process at once."""
from __future__ import annotations

import pytorch_lightning as pl
import torch

from vision_attn.errors import TrainingError

__all__ = ["stop_if_not_finite"]


def stop_if_not_finite(module: pl.LightningModule, loss: torch.Tensor, batch_idx: int, *, clip: str) -> None:
    """Raise :class:`TrainingError` naming the step, epoch and batch when ``loss`` is not finite on any
    process (under DDP every process takes the same decision, so none waits forever for the others).
    ``clip`` is the ``trainer.gradient_clip_val`` to suggest."""
    finite = bool(torch.isfinite(loss.detach()))
    if module.trainer.world_size > 1:
        finite = module.trainer.strategy.reduce_boolean_decision(finite, all=True)
    if not finite:
        raise TrainingError(
            f"the training loss is {loss.item()} at step {module.global_step} (epoch {module.current_epoch}, "
            f"batch {batch_idx}): training stopped; lower model.lr, set trainer.gradient_clip_val (e.g. {clip}), "
            f"or check the data")
