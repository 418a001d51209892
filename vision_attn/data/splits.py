"""A data root resolved to train and val samples with one class list.

Layouts: ``ROOT/train/CLASS/...`` with ``ROOT/val/CLASS/...`` (ImageNet style); ``ROOT/train`` alone,
or ``ROOT/CLASS/...``, split per class with a seeded fraction; ``demo:NAME`` (see
:mod:`vision_attn.data.demo`). The classes are train's; a val class that train lacks is an error.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from vision_attn.data.demo import resolve_root
from vision_attn.data.faults import Faults, screen_images, verify_images
from vision_attn.data.folder import Sample, scan_folder, split_samples
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
    faults: Faults = field(default_factory=Faults)  # the bad files met (skipped with skip_bad_images)
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)  # (width, height) of each image decoded

    @property
    def bad(self) -> list[str]:
        """The files left out (``skip_bad_images``) or found bad (``data check``)."""
        return [p.path for p in self.faults.problems]

    def summary(self) -> str:
        """One line: images per split, classes, files ignored and skipped."""
        s = (f"{self.root}: {len(self.train)} train / {len(self.val)} val images, {len(self.classes)} classes "
             f"({self.layout})")
        if self.ignored:
            s += f"; {self.ignored} non-image file(s) ignored"
        if self.bad:
            s += (f"; {len(self.bad)} unreadable image(s) skipped" if self.faults.mode == "skip"
                  else f"; {len(self.bad)} problem(s) found")
        return s


def _drop_bad(samples: list[Sample], faults: Faults, threads: int, sizes: dict[str, tuple[int, int]],
              progress: Callable[[int, int], None] | None, check: str = "decode") -> list[Sample]:
    """The samples, each decoded once when bad ones are to be skipped or listed (``check="decode"``; the
    sizes of those decoded go to ``sizes``); ``"screen"``: each checked cheaply instead
    (:func:`~vision_attn.data.faults.quick_problem`), the problems gathered in ``faults``; ``"none"``:
    not read."""
    if check == "none":
        return samples
    if check == "screen":
        screen_images([p for p, _ in samples], faults, threads)
        return samples
    decoded = verify_images([p for p, _ in samples], faults, threads, progress)
    sizes.update(decoded)
    return [s for s in samples if s[0] in decoded]


def _check_classes(classes: list[str], train: list[Sample], where: Path, faults: Faults) -> None:
    """Every class has a training image: a DataError, or (collecting) a problem for each class not named yet."""
    have = {label for _, label in train}
    missing = [c for i, c in enumerate(classes) if i not in have]
    if missing and faults.mode == "collect":
        named = {p.path for p in faults.problems}
        for c in missing:
            if os.fspath(where / c) not in named:
                faults.bad(where / c, "no readable training image in this class", fix="add images or remove the folder")
        return
    if missing:
        raise DataError(f"{where}: class(es) {', '.join(map(repr, missing))} have no readable training image; "
                        f"add images or remove the class folder")


def load_splits(root: str | os.PathLike, *, val_fraction: float = 0.2, split_seed: int = 0,
                skip_bad_images: bool = False, threads: int = 4, faults: Faults | None = None,
                progress: Callable[[int, int], None] | None = None, screen: bool = True) -> ClassificationSplits:
    """Scan ``root`` (a folder or ``demo:NAME``) into train and val samples.

    ``val_fraction`` and ``split_seed`` apply when the root has no ``val/`` folder.
    ``skip_bad_images``: decode every image once now and leave out those that fail (listed in
    ``faults``); otherwise every image is screened cheaply (its header, how it ends) and one
    :class:`DataError` lists every problem of the set (an empty class folder among them; ``screen=False``:
    the scan's problems only, the images' bytes not read, as ``data pack`` copies them); a fault only a
    full decode finds raises a DataError naming the file when it is read.
    ``faults``: another policy (``Faults("collect")``: list every bad file, as ``data check`` does);
    ``progress(done, total)``: called as images are decoded.
    """
    policy = faults if faults is not None else Faults("skip" if skip_bad_images else "raise")
    # "raise": every problem of the set gathered first (each image screened cheaply), then one error lists them
    gather = policy.mode == "raise"
    faults = Faults("collect") if gather else policy
    check = ("screen" if screen else "none") if gather else "decode"
    sizes: dict[str, tuple[int, int]] = {}
    path = resolve_root(root)
    if not path.is_dir():
        raise DataError(f"data root {path}: no such folder; give a folder with train/ and val/ class folders, "
                        f"a folder of class folders, or demo:digits")
    train_dir, val_dir = path / "train", path / "val"
    if train_dir.is_dir() and val_dir.is_dir():
        tr = scan_folder(train_dir, role="train", faults=faults)
        va = scan_folder(val_dir, classes=tr.classes, role="val", faults=faults)
        train = _drop_bad(tr.samples, faults, threads, sizes, progress, check)
        val = _drop_bad(va.samples, faults, threads, sizes, progress, check)
        _stop_on_problems(faults, policy, path)
        _check_classes(tr.classes, train, train_dir, policy)
        return ClassificationSplits(path, tr.classes, train, val, "train/val", tr.ignored + va.ignored, policy, sizes)
    if val_dir.is_dir():
        raise DataError(f"{path} has val/ but no train/ folder; add train/CLASS/... beside it")
    folder, layout = (train_dir, "split train/") if train_dir.is_dir() else (path, "split root")
    scan = scan_folder(folder, role="train" if folder == train_dir else "data", faults=faults)
    samples = _drop_bad(scan.samples, faults, threads, sizes, progress, check)
    _stop_on_problems(faults, policy, path)
    train, val = split_samples(samples, val_fraction, split_seed)
    _check_classes(scan.classes, train, folder, policy)
    return ClassificationSplits(path, scan.classes, train, val, f"{layout} {1 - val_fraction:.0%}/{val_fraction:.0%}",
                                scan.ignored, policy, sizes)


def _stop_on_problems(gathered: Faults, policy: Faults, root: Path) -> None:
    """Under the ``"raise"`` policy: one DataError listing every problem ``gathered``; the notes carried over."""
    if gathered is policy:
        return
    policy.notes += gathered.notes
    policy.counts.update(gathered.counts)
    gathered.raise_problems(f"data root {root}")
