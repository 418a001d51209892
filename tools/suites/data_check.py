"""How long `vision-attn data check` takes on 10,000 small images: a class folder (10 classes of 1,000
64x64 JPEGs) and a YOLO set of the same images with one label file each (3 boxes a file), both
written to a temporary folder first (not timed). Each check decodes every image once with the
machine's CPUs as threads, as the command does. ``--vs ultralytics`` also times ultralytics' own
label scan of the same YOLO set (``verify_image_label`` over a thread pool of the CPUs, what its
``YOLODataset`` runs before training when no label cache exists), which checks image headers
(``PIL.Image.verify``, and a JPEG's end marker) without decoding.

    python tools/bench.py data-check --vs ultralytics   # --images 10000 --size 64
"""
from __future__ import annotations

import os
import tempfile
import time
from multiprocessing.pool import ThreadPool
from pathlib import Path

import numpy as np

from tools.suites.harness import Param, Suite


def _write(root: Path, n: int, size: int) -> tuple[Path, Path]:
    from PIL import Image

    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
    cls_root, yolo = root / "folder", root / "yolo"
    for i in range(n):
        img = Image.fromarray(np.roll(base, i, axis=1))
        path = cls_root / f"c{i % 10}" / f"{i:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        img.save(path, quality=90)
        for split in ("train", "val") if i < n // 10 else ("train",):  # val: the first tenth again
            (yolo / "images" / split).mkdir(parents=True, exist_ok=True)
            (yolo / "labels" / split).mkdir(parents=True, exist_ok=True)
            target = yolo / "images" / split / f"{i:05d}.jpg"
            if not target.exists():
                os.link(path, target)
            (yolo / "labels" / split / f"{i:05d}.txt").write_text(
                "".join(f"{k} {0.2 + 0.3 * k:.3f} 0.5 0.2 0.3\n" for k in range(3)))
    (yolo / "data.yaml").write_text(f"path: {yolo}\ntrain: images/train\nval: images/val\n"
                                    f"names: [{', '.join(str(k) for k in range(10))}]\n")
    return cls_root, yolo / "data.yaml"


def _ultralytics_scan(data_yaml: Path) -> tuple[int, int, float]:
    """(images, corrupt, seconds) of ultralytics' verify_image_label over train and val."""
    from tools.ultralytics_env import quiet_ultralytics_environment

    quiet_ultralytics_environment()
    from ultralytics.data.utils import verify_image_label

    root = data_yaml.parent
    jobs = [(str(p), str(root / "labels" / split / (p.stem + ".txt")), "", False, 10, 0, 0, False)
            for split in ("train", "val") for p in sorted((root / "images" / split).iterdir())]
    start = time.perf_counter()
    with ThreadPool(os.cpu_count()) as pool:
        results = pool.map(verify_image_label, jobs)
    return len(jobs), sum(r[0] is None for r in results), time.perf_counter() - start


def run(p, record) -> None:
    from vision_attn.data import check_data

    with tempfile.TemporaryDirectory() as tmp:
        folder, data_yaml = _write(Path(tmp), p.images, p.size)
        record.line(f"{p.images} JPEGs of {p.size}x{p.size}, {os.cpu_count()} CPUs")
        for name, source in (("class folder", folder), ("YOLO set (train + val)", data_yaml)):
            start = time.perf_counter()
            report = check_data(source)
            seconds = time.perf_counter() - start
            n = sum(report.splits.values())
            record.add("checks", {"source": name, "images": n, "seconds": seconds,
                                  "problems": len(report.faults.problems)})
            record.line(f"{name}: {n} images checked in {seconds:.1f} s ({n / seconds:.0f} images/s), "
                        f"{len(report.faults.problems)} problems")
        if p.vs == "ultralytics":
            n, bad, seconds = _ultralytics_scan(data_yaml)
            record.results["ultralytics"] = {"images": n, "corrupt": bad, "seconds": seconds}
            record.line(f"ultralytics verify_image_label, same YOLO set (headers only): {n} images in {seconds:.1f} s "
                        f"({n / seconds:.0f} images/s), {bad} corrupt")


SUITE = Suite("data-check", "`vision-attn data check` on 10,000 small JPEGs (class folder and YOLO set)", run, (
    Param("images", 10_000, "JPEG files", quick=20),
    Param("size", 64, "pixels a side", quick=16),
    Param("vs", "", "also time the peer's label scan", choices=["", "ultralytics"]),
), doc=__doc__)
