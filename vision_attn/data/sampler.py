"""The order of a data set's items in each epoch, as a function of (seed, epoch) alone.

:class:`EpochSampler` shuffles with a generator seeded by ``seed + epoch`` (as ``DistributedSampler``
after ``set_epoch``), gives each of ``num_replicas`` processes its share (the order padded to a
multiple of the process count, then every ``num_replicas``-th item from ``rank``), and can start an
epoch part-way through (:meth:`EpochSampler.resume_at`), which is how a resumed run continues with
the next batch. With ``with_epoch`` it yields ``(index, epoch)`` keys for :class:`EpochItems`, whose
random augmentation of an item is a function of (seed, epoch, index): the same in any process,
DataLoader worker or resumed run, so that no worker's random state needs saving.
"""
from __future__ import annotations

import math
import random
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

__all__ = ["EpochSampler", "EpochItems", "item_seed"]


class EpochSampler(Sampler):
    """Indices of ``size`` items for one process, in an order fixed by (``seed``, epoch).

    Args:
        size: items in the data set.
        shuffle: a random permutation per epoch (else the data set's order).
        seed: the permutation's seed (added to the epoch).
        num_replicas, rank: the processes sharing each epoch and this one's rank.
        with_epoch: yield ``(index, epoch)`` (for :class:`EpochItems`) instead of ``index``.
    """

    def __init__(self, size: int, *, shuffle: bool, seed: int = 0, num_replicas: int = 1, rank: int = 0,
                 with_epoch: bool = False) -> None:
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} of {num_replicas} processes")
        self.size, self.shuffle, self.seed = int(size), shuffle, int(seed)
        self.num_replicas, self.rank, self.with_epoch = num_replicas, rank, with_epoch
        self.epoch = 0
        self.start = 0  # items of this process's share that the current epoch skips (a resumed epoch)

    def __len__(self) -> int:
        return math.ceil(self.size / self.num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """Move to ``epoch`` (Lightning calls this before each epoch); a new epoch starts at its first item."""
        if epoch != self.epoch:
            self.epoch, self.start = int(epoch), 0

    def resume_at(self, epoch: int, start: int) -> None:
        """Continue ``epoch`` after its first ``start`` items (of this process's share)."""
        self.epoch, self.start = int(epoch), max(int(start), 0)

    def order(self, epoch: int) -> list[int]:
        """This process's share of ``epoch``, in order."""
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + epoch)
            indices = torch.randperm(self.size, generator=g).tolist()
        else:
            indices = list(range(self.size))
        total = len(self) * self.num_replicas
        while len(indices) < total:  # pad as DistributedSampler does: repeat from the start
            indices += indices[:total - len(indices)]
        return indices[self.rank:total:self.num_replicas]

    def __iter__(self) -> Iterator[Any]:
        epoch, start = self.epoch, self.start
        self.start = 0  # the skip applies to one pass
        for i in self.order(epoch)[start:]:
            yield (i, epoch) if self.with_epoch else i


def item_seed(seed: int, epoch: int, index: int) -> int:
    """The augmentation seed of item ``index`` in ``epoch`` (a 32-bit integer)."""
    return int(np.random.SeedSequence((int(seed) % 2**32, int(epoch), int(index))).generate_state(1)[0])


class EpochItems(Dataset):
    """``dataset`` read by ``(index, epoch)`` keys: before each item its ``transform`` draws from new
    generators seeded with :func:`item_seed` (a key's further parts are appended to the item): an albumentations pipeline gets one NumPy and one Python
    generator for all its transforms (``set_random_state``: 0.1 ms, where ``set_random_seed`` makes a
    pair per transform: 1 ms), anything else with ``set_random_seed`` is reseeded."""

    def __init__(self, dataset: Sequence[Any], seed: int) -> None:
        self.dataset, self.seed = dataset, int(seed)

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def transform(self) -> Any:
        return getattr(self.dataset, "transform", None)

    def __getitem__(self, key: tuple[int, ...]) -> Any:
        index, epoch, *extra = key  # extra: what a batch sampler adds (a NaFlex batch's seq_len)
        transform = self.transform
        seed = item_seed(self.seed, epoch, index)
        if hasattr(transform, "set_random_state"):
            transform.set_random_state(np.random.default_rng(seed), random.Random(seed))
        elif hasattr(transform, "set_random_seed"):
            transform.set_random_seed(seed)
        item = self.dataset[index]
        return (*item, *extra) if extra else item
