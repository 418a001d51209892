"""How long `vision-attn data check` takes on 10,000 small images: a class folder (10 classes of 1,000
64x64 JPEGs) and a YOLO set of the same images with one label file each (3 boxes a file), both
written to a temporary folder first (not timed). Each check decodes every image once with the
machine's CPUs as threads, as the command does.

    .venv/bin/python tools/bench_data_check.py [--images 10000] [--size 64]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from vision_attn.data import check_data


def _write(root: Path, n: int, size: int) -> tuple[Path, Path]:
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=64)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder, data_yaml = _write(Path(tmp), args.images, args.size)
        print(f"{args.images} JPEGs of {args.size}x{args.size}, {os.cpu_count()} CPUs")
        for name, source in (("class folder", folder), ("YOLO set (train + val)", data_yaml)):
            start = time.perf_counter()
            report = check_data(source)
            seconds = time.perf_counter() - start
            n = sum(report.splits.values())
            print(f"{name}: {n} images checked in {seconds:.1f} s ({n / seconds:.0f} images/s), "
                  f"{len(report.faults.problems)} problems")


if __name__ == "__main__":
    main()
