"""``vision-attn data check``: read a whole data set once, with the checks training runs, and report.

:func:`check_data` opens a classification root (:func:`~vision_attn.data.splits.load_splits`) or a
detection set (:func:`~vision_attn.data.det_source.open_detection`, train and val) with the policy
``Faults("collect")``: nothing stops at the first bad file, every image is decoded once (in threads),
and every problem and change is listed with its file and line. The result says what training would
meet: :attr:`DataCheck.ok` is False when a problem would stop it (without ``skip_bad_images``).
Structural mistakes (no class folders, a data YAML without ``names``, malformed JSON) still raise the
:class:`~vision_attn.errors.DataError` training would raise.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np

from vision_attn.data.demo import is_demo, resolve_root
from vision_attn.data.det_source import open_detection
from vision_attn.data.faults import Faults
from vision_attn.data.splits import load_splits
from vision_attn.data.yolo_txt import read_data_yaml
from vision_attn.errors import ConfigError

__all__ = ["DataCheck", "check_data", "detect_task"]

Task = Literal["auto", "cls", "det"]
Progress = Callable[[str, int, int], None]  # (what, done, total)


@dataclass
class DataCheck:
    """What :func:`check_data` found: images per split, classes and their counts (images for
    classification, boxes for detection), image sizes, and the faults (problems and changes)."""

    source: str
    task: str
    splits: dict[str, int]
    classes: list[str]
    per_class: dict[str, dict[str, int]]  # split -> class -> count
    sizes: list[tuple[int, int]] = field(repr=False, default_factory=list)
    faults: Faults = field(default_factory=lambda: Faults("collect"))
    details: dict[str, str] = field(default_factory=dict)  # split -> the loader's summary line

    @property
    def counted(self) -> str:
        """What ``per_class`` counts: ``images`` (classification) or ``boxes`` (detection)."""
        return "images" if self.task == "cls" else "boxes"

    @property
    def ok(self) -> bool:
        """No problem that would stop training."""
        return not self.faults.problems

    def size_stats(self) -> dict[str, dict[str, float]]:
        """Min, median and max of the widths and heights of the images that decode."""
        if not self.sizes:
            return {}
        arr = np.array(self.sizes, dtype=np.float64)
        return {axis: {"min": int(arr[:, k].min()), "median": float(np.median(arr[:, k])), "max": int(arr[:, k].max())}
                for k, axis in enumerate(("width", "height"))}

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "task": self.task, "ok": self.ok, "images": self.splits,
                "classes": self.classes, "per_class": self.per_class, "sizes": self.size_stats(),
                "details": self.details, "problems": [p.as_dict() for p in self.faults.problems],
                "changed": dict(self.faults.counts), "notes": [p.as_dict() for p in self.faults.notes]}


def detect_task(source: str | os.PathLike) -> str:
    """``"det"`` for a detection set (a data YAML, a folder with ``data.yaml``, COCO ``annotations/``,
    or ``coco/``/``yolo/`` copies, ``demo:digit-boxes`` and the other ``demo:digit-*`` sets), else ``"cls``."""
    if is_demo(source):
        return "det" if str(source).startswith("demo:digit-") else "cls"  # the detection-like demos
    path = Path(source)
    if path.is_file() and path.suffix in (".yaml", ".yml"):
        return "det"
    if any((path / sub).exists() for sub in ("data.yaml", "annotations", "coco", "yolo")):
        return "det"
    return "cls"


def _has_keypoints(root: Path) -> bool:
    """Whether a YOLO data YAML (``root`` itself, or its ``data.yaml``) declares ``kpt_shape``: its rows are
    then checked as keypoint rows."""
    for yaml_file in (root, root / "data.yaml", root / "yolo" / "data.yaml"):
        if yaml_file.is_file() and yaml_file.suffix in (".yaml", ".yml"):
            return "kpt_shape" in read_data_yaml(yaml_file)[0]
    return False


def check_data(source: str | os.PathLike, task: Task = "auto", *, fmt: Literal["auto", "coco", "yolo"] = "auto",
               threads: int | None = None, progress: Progress | None = None) -> DataCheck:
    """Check the data set ``source`` as training reads it (see the module docstring); ``task``:
    ``cls``, ``det`` or ``auto`` (:func:`detect_task`); ``threads``: decoding threads (default: the CPUs);
    ``progress(what, done, total)``: called as images are decoded."""
    if task not in ("auto", "cls", "det"):
        raise ConfigError(f"task={task!r}: choose cls, det or auto")
    task = detect_task(source) if task == "auto" else task
    threads = threads or max(1, os.cpu_count() or 1)
    faults = Faults("collect")
    if task == "cls":
        splits = load_splits(source, faults=faults, threads=threads,
                             progress=None if progress is None else lambda d, t: progress("images", d, t))
        per_class = {}
        for name, samples in (("train", splits.train), ("val", splits.val)):
            counts = np.bincount([label for _, label in samples], minlength=len(splits.classes))
            per_class[name] = {c: int(n) for c, n in zip(splits.classes, counts)}
        return DataCheck(str(source), "cls", {"train": len(splits.train), "val": len(splits.val)}, splits.classes,
                         per_class, list(splits.sizes.values()), faults, {"all": splits.summary()})
    root = resolve_root(source)
    keypoints = _has_keypoints(root)
    datasets = {split: open_detection(root, split, fmt=fmt, faults=faults, keypoints=keypoints)
                for split in ("train", "val")}
    sizes: list[tuple[int, int]] = []
    for split, ds in datasets.items():
        sizes += ds.verify(threads, None if progress is None else lambda d, t, s=split: progress(s, d, t)).values()
    names = list(datasets["train"].names)
    return DataCheck(str(source), "det", {s: len(ds) for s, ds in datasets.items()}, names,
                     {s: dict(zip(names, ds.stats.per_class)) for s, ds in datasets.items()}, sizes, faults,
                     {s: ds.stats.summary() for s, ds in datasets.items()})
