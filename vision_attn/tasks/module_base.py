"""What the task LightningModules share (:class:`TrainingModule`): the EMA of the weights (built frozen so
that DDP ignores it, updated by hand after each optimizer step, its step kept in checkpoints, the network
validation and export use), the task name a checkpoint records, and the optimizer over parameter groups
with the run's step counts."""
from __future__ import annotations

import math
from typing import Any

import pytorch_lightning as pl
import torch
from timm.utils import ModelEmaV3
from torch import nn

from vision_attn.tasks.optim import build_optimizer, lightning_clips_under_autocast

__all__ = ["TrainingModule"]


class TrainingModule(pl.LightningModule):
    """A LightningModule whose trained network is ``self.model``; subclasses set :attr:`task_name` and call
    :meth:`init_ema` once the network is built."""

    task_name = ""
    """What the checkpoint records as its task (``load_run`` dispatches on it)."""

    def init_ema(self, decay: float | None, **options: Any) -> None:
        """``self.ema``: ``timm.utils.ModelEmaV3`` of ``self.model`` with ``decay`` and ``options`` (None: no
        EMA), frozen (DDP ignores it) and in the module's mode like any child (it only runs in validation,
        in eval mode)."""
        self.ema = ModelEmaV3(self.model, decay=decay, **options) if decay else None
        if self.ema is not None:
            self.ema.requires_grad_(False)
            self.ema.train()
        self._ema_step = 0

    def advance_ema(self, step: int) -> None:
        """Update the EMA from ``self.model`` after optimizer step ``step`` (timm's warmup of the decay)."""
        self.ema.update(self.model, step=step)

    def eval_model(self) -> nn.Module:
        """The network validation and export use: the EMA when there is one."""
        return self.ema.module if self.ema is not None else self.model

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.ema is not None and self.global_step > self._ema_step:  # after each optimizer step
            self.advance_ema(self.global_step)
            self._ema_step = self.global_step

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["ema_step"] = self._ema_step
        checkpoint["task"] = self.task_name

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._ema_step = int(checkpoint.get("ema_step", 0))

    def build_optimizer(self, name: str, groups: list[dict[str, Any]], **kwargs: Any) -> torch.optim.Optimizer:
        """Torch's optimizer ``name`` over ``groups`` (:func:`~vision_attn.tasks.optim.build_optimizer`, its
        fused step where the trainer's gradient clipping allows)."""
        return build_optimizer(name, groups, clips_under_autocast=lightning_clips_under_autocast(self.trainer), **kwargs)

    def optimizer_steps(self) -> tuple[int, int]:
        """(optimizer steps of the whole run, optimizer steps per epoch) as the trainer plans them."""
        total = max(int(self.trainer.estimated_stepping_batches), 1)  # also sets num_training_batches
        batches = self.trainer.num_training_batches
        per_epoch = math.ceil(batches / self.trainer.accumulate_grad_batches) if math.isfinite(batches) else total
        return total, per_epoch
