"""What the tasks' LightningDataModules share: loaders in an order that is a function of (seed, epoch),
split between the processes by :class:`~vision_attn.data.sampler.EpochSampler` (so Lightning's
``DistributedSampler`` is not used), and the training loader's position as the data module's state,
which Lightning keeps in every checkpoint and hands back before the first batch of a resumed run."""
from __future__ import annotations

import math
from typing import Any, Callable

import pytorch_lightning as pl
from torch.utils.data import DataLoader

from vision_attn.data.loader import make_loader

__all__ = ["ResumableDataModule", "training_position"]


def training_position(trainer: "pl.Trainer") -> tuple[int, int]:
    """(epoch, batches of it done) where training goes on from: the next epoch once an epoch's
    batches are all done."""
    epoch = int(trainer.current_epoch)
    done = int(trainer.fit_loop.epoch_loop.batch_progress.current.completed)
    batches = trainer.num_training_batches
    if math.isfinite(batches) and done >= batches:
        return epoch + 1, 0
    return epoch, done


class ResumableDataModule(pl.LightningDataModule):
    """A data module whose hyper-parameters have ``num_workers``, ``persistent_workers``,
    ``pin_memory``, ``drop_last`` and ``seed``; :meth:`loader` builds its loaders."""

    def __init__(self) -> None:
        super().__init__()
        self._resume_at: tuple[int, int] | None = None

    def loader(self, dataset: Any, batch_size: int, *, train: bool,
               collate_fn: Callable[[list], Any] | None = None,
               batches: Callable[[Any], Any] | None = None) -> DataLoader:
        """A loader over this process's share of ``dataset``; a resumed training loader starts after
        the batches its checkpoint had done. ``batches``: the training batch sampler, made from the
        process's :class:`~vision_attn.data.sampler.EpochSampler` (see :func:`~vision_attn.data.loader.make_loader`)."""
        hp = self.hparams
        trainer = self.trainer
        replicas, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        loader = make_loader(dataset, batch_size, train=train, num_workers=hp.num_workers,
                             persistent_workers=hp.persistent_workers, pin_memory=hp.pin_memory,
                             drop_last=hp.drop_last, seed=hp.seed, collate_fn=collate_fn, num_replicas=replicas,
                             rank=rank, batches=batches)
        if train and self._resume_at is not None:
            epoch, done = self._resume_at
            if batches is not None:  # batches of many sizes: skipped as batches
                loader.batch_sampler.resume_at(epoch, done)
            else:
                loader.sampler.resume_at(epoch, done * batch_size)
            self._resume_at = None
        return loader

    def state_dict(self) -> dict[str, Any]:
        if self.trainer is None:
            return {}
        return {"position": list(training_position(self.trainer))}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        position = state_dict.get("position")
        if position is not None:
            self._resume_at = (int(position[0]), int(position[1]))
