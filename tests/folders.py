"""Small generated image folders for the data and training tests."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image


def write_image(path: Path, label: int, size: int = 16, seed: int = 0, fmt: str | None = None) -> Path:
    """A (size, size) RGB image whose bright stripe position depends on ``label`` (learnable)."""
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 60, (size, size, 3), dtype=np.uint8)
    row = (label * 3) % size
    img[row:row + 3] = 230
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(path, format=fmt)
    return path


def make_folder(root: Path, classes: Sequence[str] = ("cat", "dog", "fox"), n_train: int = 8, n_val: int = 3,
                size: int = 16, split: bool = True) -> Path:
    """``root/train/CLASS/*.png`` and ``root/val/CLASS/*.png`` (or ``root/CLASS/*.png`` without split)."""
    for label, name in enumerate(classes):
        parts = (("train", n_train), ("val", n_val)) if split else (("", n_train + n_val),)
        for part, n in parts:
            for i in range(n):
                folder = root / part / name if part else root / name
                write_image(folder / f"{name}_{i:03d}.png", label, size, seed=1000 * label + i + (500 if part == "val" else 0))
    return root
