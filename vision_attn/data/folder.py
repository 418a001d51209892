"""ImageNet-style image folders: ``ROOT/CLASS/IMAGE`` scanned, checked and decoded.

A folder holds one subfolder per class (sorted names give the labels 0..C-1); images may lie in
nested folders below a class folder (links followed once, :func:`~vision_attn.data.faults.walk_images`).
Files with other extensions (``.txt``, ``.csv``, ``.DS_Store``) and hidden files are ignored and
counted. A class folder without images is a problem of the scan's Faults when they are collected
(else an error naming the folder), a ``val`` class that ``train`` lacks an error naming the folder; an empty image, a broken or looping link go to the scan's
:class:`~vision_attn.data.faults.Faults` (an error naming the file by default). Decoding (PIL) happens
when a sample is read; an image that does not decode raises a :class:`DataError` naming the file,
unless the images were decoded first (``skip_bad_images``: :func:`~vision_attn.data.faults.verify_images`),
which leaves them out and lists them.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from vision_attn.data.decode import read_image
from vision_attn.data.faults import IMAGE_EXTENSIONS, SKIP_HINT, Faults, walk_images
from vision_attn.errors import DataError

__all__ = ["IMAGE_EXTENSIONS", "image_paths", "FolderScan", "ImageFolder", "scan_folder", "split_samples",
           "load_image", "SKIP_HINT"]  # IMAGE_EXTENSIONS and SKIP_HINT: from data/faults.py

Sample = tuple[str, int]  # (path, label)


@dataclass
class FolderScan:
    """What :func:`scan_folder` found: class names (label = index), samples, ignored files."""

    root: Path
    classes: list[str]
    samples: list[Sample]
    ignored: int = 0  # non-image and hidden files

    def counts(self) -> list[int]:
        """Images per class, in label order."""
        out = [0] * len(self.classes)
        for _, label in self.samples:
            out[label] += 1
        return out


def _class_dirs(root: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))


def scan_folder(root: str | Path, classes: Sequence[str] | None = None, *, role: str = "data",
                faults: Faults | None = None) -> FolderScan:
    """List the images of ``root`` (``root/CLASS/...``) with labels.

    ``classes``: the label order to use (a ``val`` folder takes ``train``'s); a class folder not among
    them is an error. ``role`` names the folder in messages (``"train"``, ``"val"``). ``faults``: the
    policy for empty images and broken links (default: the first is an error naming it).
    """
    root = Path(root)
    faults = faults if faults is not None else Faults()
    if not root.is_dir():
        raise DataError(f"{role} folder {root}: no such folder; give a folder with one subfolder per class "
                        f"(ROOT/CLASS/IMAGE.jpg)")
    found = _class_dirs(root)
    if not found:
        raise DataError(f"{role} folder {root} has no class subfolders; expected one subfolder per class "
                        f"(ROOT/CLASS/IMAGE.jpg)")
    if classes is None:
        classes = found
    else:
        unknown = [c for c in found if c not in classes]
        if unknown:
            raise DataError(
                f"{role} folder {root}: class folder(s) {', '.join(map(repr, unknown))} are not among train's "
                f"{len(classes)} classes ({', '.join(list(classes)[:8])}{', ...' if len(classes) > 8 else ''}); "
                f"every {role} class needs images in train: add them there or remove the folder")
    index = {c: i for i, c in enumerate(classes)}
    samples: list[Sample] = []
    ignored = 0
    seen: set[tuple[int, int]] = set()  # folders walked: a link into one of them is not walked twice
    for name in found:
        n_problems = len(faults.problems)
        paths, n_other = walk_images(root / name, faults, seen)
        samples += [(p, index[name]) for p in paths]
        ignored += n_other
        if not paths and len(faults.problems) == n_problems:
            detail = f"{n_other} other file(s) ignored; images are {', '.join(sorted(IMAGE_EXTENSIONS))}"
            if faults.mode != "collect":  # skipping images cannot make a class
                raise DataError(f"{role} class folder {root / name} has no images ({detail}); add images or "
                                f"remove the folder")
            faults.bad(root / name, f"a {role} class folder with no images ({detail})",
                       fix="add images or remove the folder")
    return FolderScan(root=root, classes=list(classes), samples=samples, ignored=ignored)


def load_image(path: str | Path) -> np.ndarray:
    """Decode the image at ``path`` to an (H, W, 3) uint8 RGB array; a file that does not decode
    completely (corrupt, truncated, not an image, gone) raises a :class:`DataError` naming it
    (:func:`~vision_attn.data.decode.read_image` at full size)."""
    return read_image(path)[0]


def split_samples(samples: Sequence[Sample], val_fraction: float, seed: int = 0) -> tuple[list[Sample], list[Sample]]:
    """A seeded split of one folder into train and val, per class (stratified); each class keeps at
    least one training image, and a class of one image has none in val."""
    if not 0.0 < val_fraction < 1.0:
        raise DataError(f"val_fraction={val_fraction}: give a fraction between 0 and 1 (e.g. 0.2)")
    by_class: dict[int, list[Sample]] = {}
    for s in samples:
        by_class.setdefault(s[1], []).append(s)
    rng = random.Random(seed)
    train: list[Sample] = []
    val: list[Sample] = []
    for label in sorted(by_class):
        items = sorted(by_class[label])
        rng.shuffle(items)
        n_val = min(round(val_fraction * len(items)), len(items) - 1)
        val += items[:n_val]
        train += items[n_val:]
    return train, val


class ImageFolder(torch.utils.data.Dataset):
    """Samples ``(path, label)`` -> (transformed image, label).

    With an albumentations ``transform`` ending in ``ToTensorV2`` an item is a (3, H, W) float tensor
    and an int label; without one, the (H, W, 3) uint8 array. A transform with a ``read(path)``
    method (:mod:`~vision_attn.data.file_transforms`: the crop drawn before decoding, a JPEG decoded
    at reduced size) is handed the path instead of the decoded array. ``classes`` names the labels.
    """

    def __init__(self, samples: Sequence[Sample], classes: Sequence[str],
                 transform: Callable[..., dict[str, Any]] | None = None) -> None:
        self.samples = list(samples)
        self.classes = list(classes)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path, label = self.samples[index]
        read = getattr(self.transform, "read", None)
        if read is not None:
            return read(path), label
        image = load_image(path)
        if self.transform is not None:
            image = self.transform(image=image)["image"]
        return image, label


def image_paths(items: Sequence[str | os.PathLike]) -> list[Path]:
    """Image files among ``items`` (folders are searched recursively, links followed once), in order;
    DataError for a missing path, a file that is not an image, a broken link, or no image at all."""
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            out += sorted(Path(q) for q in walk_images(p, Faults())[0])
        elif p.is_file():
            if p.suffix.lower() not in IMAGE_EXTENSIONS:
                raise DataError(f"{p}: not an image file (extension {p.suffix or 'none'}; images are "
                                f"{', '.join(sorted(IMAGE_EXTENSIONS))})")
            out.append(p)
        else:
            raise DataError(f"{p}: no such file or folder")
    if not out:
        raise DataError(f"no images found in {', '.join(map(str, items))}")
    return out
