"""The toy task's LightningModule: images (B, 3, H, W) in [0, 1] -> their mean colour (B, 3), trained with
the mean squared error; validation logs ``val/loss`` and ``val/score`` (1 - mean absolute error)."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.tasks.module_base import TrainingModule


def toy_network(width: int) -> nn.Module:
    """A convolution, a pool and a linear layer: (B, 3, H, W) -> (B, 3) in [0, 1]."""
    return nn.Sequential(nn.Conv2d(3, width, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(width, 3), nn.Sigmoid())


class ToyModule(TrainingModule):
    """``width``: the convolution's channels; ``lr``: Adam's rate; ``ema_decay``: the EMA's (None: none)."""

    task_name = "toy"

    def __init__(self, width: int = 8, lr: float = 0.01, ema_decay: float | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = toy_network(width)
        self.init_ema(ema_decay)
        self.last_val_step = -1
        self._errors: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.eval_model()(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self.model(x), y)
        self.log("train/loss", loss, on_step=True, on_epoch=True, batch_size=x.shape[0])
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        pred = self(x)
        self.log("val/loss", F.mse_loss(pred, y), batch_size=x.shape[0])
        self._errors.append((pred - y).abs().detach())

    def on_validation_epoch_end(self) -> None:
        errors = torch.cat(self._errors) if self._errors else torch.zeros(1, 3)
        self.log("val/score", 1 - errors.mean(), batch_size=1)
        self._errors = []
        if not self.trainer.sanity_checking:
            self.last_val_step = self.global_step

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.build_optimizer("adamw", [{"params": list(self.model.parameters())}], lr=self.hparams.lr)
