"""The toy task's data: ``toy:N`` is N generated images (seeded), each one random colour plus noise; the
target of an image is its mean colour, (3,) in [0, 1]."""
from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from vision_attn.errors import DataError
from vision_attn.tasks.data_module import ResumableDataModule


def colour_images(n: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (size, size, 3) uint8 images of one random colour with noise, and their mean colours (n, 3)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(30, 226, size=(n, 1, 1, 3))
    images = np.clip(base + rng.integers(-25, 26, size=(n, size, size, 3)), 0, 255).astype(np.uint8)
    return images, images.reshape(n, -1, 3).mean(1) / 255.0


def open_toy(source: str, size: int, seed: int = 0) -> TensorDataset:
    """``toy:N`` as a dataset of (3, H, W) float images in [0, 1] and (3,) targets."""
    count = source.removeprefix("toy:")
    if not source.startswith("toy:") or not count.isdigit() or int(count) < 1:
        raise DataError(f"data {source!r}: the toy task reads toy:N (N generated images, e.g. toy:32)")
    images, targets = colour_images(int(count), size, seed)
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255
    return TensorDataset(x, torch.from_numpy(targets).float())


class ToyDataModule(ResumableDataModule):
    """Train and val sets of ``data`` (``toy:N``; val: another seed, a quarter as many) at ``img_size``."""

    def __init__(self, data: str = "toy:32", img_size: int = 16, batch_size: int = 8, seed: int = 0,
                 num_workers: int = 0, persistent_workers: bool = False, pin_memory: bool = False,
                 drop_last: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.train_set: Dataset = open_toy(data, img_size, seed)
        n = max(len(self.train_set) // 4, 1)
        self.val_set: Dataset = open_toy(f"toy:{n}", img_size, seed + 1)

    def train_dataloader(self):
        return self.loader(self.train_set, self.hparams.batch_size, train=True)

    def val_dataloader(self):
        return self.loader(self.val_set, self.hparams.batch_size, train=False)
