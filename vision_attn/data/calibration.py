"""Images to calibrate an INT8 model on: a seeded sample of a data set's training split, through the
run's own evaluation pipeline (what the model sees when it predicts), in batches.

:func:`folder_calibration` for class folders (``demo:digits`` included), :func:`detection_calibration`
for detection sets (letterboxed as evaluation letterboxes them); :func:`labelled_folder` is the split
folder of a data root that both classification helpers read.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import torch
from torch.utils.data import DataLoader

from vision_attn.data.demo import resolve_root
from vision_attn.data.det_source import open_detection
from vision_attn.data.det_transforms import DetectionTransform
from vision_attn.data.folder import ImageFolder, scan_folder
from vision_attn.errors import DataError

__all__ = ["folder_calibration", "detection_calibration", "labelled_folder"]


def labelled_folder(data: str | os.PathLike, split: str) -> Path:
    """The ``split`` folder of the data root ``data`` (``demo:digits`` included) if it has one, else the
    root itself (class folders)."""
    root = resolve_root(data)
    folder = root / split if (root / split).is_dir() else root
    if not folder.is_dir():
        raise DataError(f"--data {data}: no such folder; give a folder of class folders or demo:digits")
    return folder


def _sample(n: int, images: int, seed: int) -> list[int]:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:images].tolist()


def folder_calibration(data: str | os.PathLike, transform: Callable, classes: list[str] | None, *,
                       images: int = 256, batch: int = 16, seed: int = 0) -> list[torch.Tensor]:
    """``images`` images of ``data`` (its ``train/`` folder if it has one, else its class folders),
    a seeded sample, through ``transform`` (the evaluation pipeline), in batches."""
    scan = scan_folder(labelled_folder(data, "train"), classes=classes, role="calibration")
    dataset = ImageFolder([scan.samples[i] for i in _sample(len(scan.samples), images, seed)], scan.classes, transform)
    return [x for x, _ in DataLoader(dataset, batch_size=batch)]


def detection_calibration(data: str | os.PathLike, img_size: int, *, images: int = 128, batch: int = 8,
                          seed: int = 0) -> list[torch.Tensor]:
    """``images`` images of the ``train`` split of the detection set ``data`` (``demo:digit-boxes``, a
    YOLO data YAML or a COCO folder), a seeded sample, letterboxed to ``img_size`` squares, in batches."""
    dataset = open_detection(data, "train", transform=DetectionTransform(img_size))
    picked = [dataset[i][0] for i in _sample(len(dataset), images, seed)]
    return [torch.stack(picked[i:i + batch]) for i in range(0, len(picked), batch)]
