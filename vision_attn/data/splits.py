"""A data root resolved to train and val samples with one class list.

Layouts: ``ROOT/train/CLASS/...`` with ``ROOT/val/CLASS/...`` (ImageNet style); ``ROOT/train`` alone,
or ``ROOT/CLASS/...``, split per class with a seeded fraction; ``demo:NAME`` (see
:mod:`vision_attn.data.demo`). The classes are train's; a val class that train lacks is an error.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from vision_attn.data.demo import resolve_root
from vision_attn.data.folder import SKIP_HINT, Sample, check_images, scan_folder, split_samples
from vision_attn.errors import DataError

__all__ = ["ClassificationSplits", "load_splits"]


@dataclass
class ClassificationSplits:
    """Train and val samples ``(path, label)``, the class names, and what was left out."""

    root: Path
    classes: list[str]
    train: list[Sample]
    val: list[Sample]
    layout: str  # "train/val", "split train/", "split root"
    ignored: int = 0  # non-image files
    bad: list[str] = field(default_factory=list)  # images skipped because they do not decode

    def summary(self) -> str:
        """One line: images per split, classes, files ignored and skipped."""
        s = (f"{self.root}: {len(self.train)} train / {len(self.val)} val images, {len(self.classes)} classes "
             f"({self.layout})")
        if self.ignored:
            s += f"; {self.ignored} non-image file(s) ignored"
        if self.bad:
            s += f"; {len(self.bad)} unreadable image(s) skipped"
        return s


def _drop_bad(samples: list[Sample], empty: list[str], skip: bool, threads: int) -> tuple[list[Sample], list[str]]:
    if empty and not skip:
        raise DataError(f"{empty[0]}: empty image file (0 bytes)"
                        f"{f' and {len(empty) - 1} more' if len(empty) > 1 else ''}; {SKIP_HINT}")
    if not skip:
        return samples, []
    good, bad = check_images(samples, threads)
    return good, sorted(empty) + bad


def _check_classes(classes: list[str], train: list[Sample], where: Path) -> None:
    have = {label for _, label in train}
    missing = [c for i, c in enumerate(classes) if i not in have]
    if missing:
        raise DataError(f"{where}: class(es) {', '.join(map(repr, missing))} have no readable training image; "
                        f"add images or remove the class folder")


def load_splits(root: str | os.PathLike, *, val_fraction: float = 0.2, split_seed: int = 0,
                skip_bad_images: bool = False, threads: int = 4) -> ClassificationSplits:
    """Scan ``root`` (a folder or ``demo:NAME``) into train and val samples.

    ``val_fraction`` and ``split_seed`` apply when the root has no ``val/`` folder.
    ``skip_bad_images``: decode every image once now and leave out those that fail (counted in
    ``bad``); otherwise an unreadable image raises a :class:`DataError` naming it when it is read.
    """
    path = resolve_root(root)
    if not path.is_dir():
        raise DataError(f"data root {path}: no such folder; give a folder with train/ and val/ class folders, "
                        f"a folder of class folders, or demo:digits")
    train_dir, val_dir = path / "train", path / "val"
    if train_dir.is_dir() and val_dir.is_dir():
        tr = scan_folder(train_dir, role="train")
        va = scan_folder(val_dir, classes=tr.classes, role="val")
        train, bad_t = _drop_bad(tr.samples, tr.empty_files, skip_bad_images, threads)
        val, bad_v = _drop_bad(va.samples, va.empty_files, skip_bad_images, threads)
        _check_classes(tr.classes, train, train_dir)
        return ClassificationSplits(path, tr.classes, train, val, "train/val", tr.ignored + va.ignored, bad_t + bad_v)
    if val_dir.is_dir():
        raise DataError(f"{path} has val/ but no train/ folder; add train/CLASS/... beside it")
    folder, layout = (train_dir, "split train/") if train_dir.is_dir() else (path, "split root")
    scan = scan_folder(folder, role="train" if folder == train_dir else "data")
    samples, bad = _drop_bad(scan.samples, scan.empty_files, skip_bad_images, threads)
    train, val = split_samples(samples, val_fraction, split_seed)
    _check_classes(scan.classes, train, folder)
    return ClassificationSplits(path, scan.classes, train, val, f"{layout} {1 - val_fraction:.0%}/{val_fraction:.0%}",
                                scan.ignored, bad)
