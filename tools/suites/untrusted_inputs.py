"""Hostile files against the commands that open them: each must be refused with exit status 2, a
one-line error naming the file, no file written, quickly and without the process growing.

    python tools/bench.py untrusted-inputs                      # a table
    python tools/bench.py untrusted-inputs --json out.json      # the record (what the test reads)

The files are written to a temporary folder: a detector YAML with a 9-level alias bomb (4 KB on
disk, 10^9 nodes expanded), the same bomb appended to a training config and to a data YAML, YAML and
JSON nested 10,000 deep, and a 50 MB training config. Every scenario runs in this one process through
``vision_attn.cli.main`` after the heavy imports are done, so the time and the growth of the resident
set (``ru_maxrss`` before and after) belong to the refusal itself.
"""
from __future__ import annotations

import contextlib
import io
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from tools.suites.harness import Suite

DETECTOR = """\
nc: 2
scales:
  n: [0.33, 0.25, 1024]
backbone:
  - [-1, 1, Conv, [64, 3, 2]] # 0
  - [-1, 1, Conv, [128, 3, 2]] # 1
  - [-1, 1, C2f, [128, True]] # 2
  - [-1, 1, Conv, [256, 3, 2]] # 3
  - [-1, 1, C2f, [256, True]] # 4
head:
  - [[2, 4], 1, Detect, [nc]] # 5
"""


def alias_bomb(levels: int = 9, fan: int = 10, prefix: str = "bomb") -> str:
    """``levels`` anchors, each a list of ``fan`` aliases of the previous one: fan**levels nodes."""
    lines = [f"{prefix}0: &{prefix}0 [" + ", ".join(["x"] * fan) + "]"]
    for i in range(1, levels):
        lines.append(f"{prefix}{i}: &{prefix}{i} [" + ", ".join([f"*{prefix}{i - 1}"] * fan) + "]")
    return "\n".join(lines) + "\n"


def write_files(folder: Path) -> dict[str, Path]:
    files = {
        "detector.yaml": DETECTOR,
        "bomb_detector.yaml": DETECTOR + alias_bomb(),
        "bomb_train.yaml": "model:\n  name: vit_tiny_patch16_224\n" + alias_bomb(),
        "bomb_train_det.yaml": "model:\n  yaml: detector.yaml\n" + alias_bomb(),
        "bomb_data.yaml": "path: .\ntrain: images\nval: images\nnames: [a, b]\n" + alias_bomb(),
        "deep.yaml": "model: " + "[" * 10_000 + "]" * 10_000 + "\n",
        "deep_detector.yaml": DETECTOR + "deep: " + "[" * 10_000 + "]" * 10_000 + "\n",
        "deep.json": "[" * 10_000 + "]" * 10_000,
        "big_train.yaml": "model:\n  name: vit_tiny_patch16_224\n# " + "x" * (50 << 20) + "\n",
    }
    out = {}
    for name, text in files.items():
        (folder / name).write_text(text)
        out[name] = folder / name
    return out


def scenarios(f: dict[str, Path], folder: Path) -> list[tuple[str, str, Callable[[], int]]]:
    """(label, the file that must be named, a call returning an exit status)."""
    from vision_attn import build_detector
    from vision_attn.cli import main
    from vision_attn.data import CocoDetection
    from vision_attn.errors import VisionAttnError

    def cli(*argv: str | Path) -> Callable[[], int]:
        return lambda: main([str(a) for a in argv])

    def api(call: Callable[[], object]) -> Callable[[], int]:
        def run() -> int:
            try:
                call()
            except VisionAttnError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
            return 0
        return run

    det = "bomb_detector.yaml"
    return [
        ("yaml info (alias bomb detector YAML)", det, cli("yaml", "info", f[det])),
        ("yaml insert (alias bomb detector YAML)", det,
         cli("yaml", "insert", f[det], "--block", "CBAM", "--after", "C2f", "-o", folder / "out.yaml")),
        ("build_detector (alias bomb detector YAML)", det, api(lambda: build_detector(f[det]))),
        ("train det --model.yaml (alias bomb detector YAML)", det,
         cli("train", "det", "--model.yaml", f[det], "--runs_dir", folder / "runs")),
        ("train cls --config (alias bomb training config)", "bomb_train.yaml",
         cli("train", "cls", "--config", f["bomb_train.yaml"], "--runs_dir", folder / "runs")),
        ("train det --config (alias bomb training config)", "bomb_train_det.yaml",
         cli("train", "det", "--config", f["bomb_train_det.yaml"], "--runs_dir", folder / "runs")),
        ("train det --data.data (alias bomb data YAML)", "bomb_data.yaml",
         cli("train", "det", "--model.yaml", f["detector.yaml"], "--data.data", f["bomb_data.yaml"],
             "--runs_dir", folder / "runs")),
        ("train cls --config (YAML nested 10,000 deep)", "deep.yaml",
         cli("train", "cls", "--config", f["deep.yaml"], "--runs_dir", folder / "runs")),
        ("yaml info (detector YAML nested 10,000 deep)", "deep_detector.yaml", cli("yaml", "info", f["deep_detector.yaml"])),
        ("COCO annotations (JSON nested 10,000 deep)", "deep.json",
         api(lambda: CocoDetection(folder, f["deep.json"]))),
        ("train cls --config (50 MB config file)", "big_train.yaml",
         cli("train", "cls", "--config", f["big_train.yaml"], "--runs_dir", folder / "runs")),
    ]


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _warm_up() -> None:
    """The imports and parsers every scenario shares, so that they are not counted against it."""
    import pytorch_lightning  # noqa: F401

    import vision_attn.cli  # noqa: F401
    from vision_attn.tasks import get_task
    from vision_attn.tasks.config import build_train_parser

    build_train_parser(get_task("cls"))
    build_train_parser(get_task("det"))


def run_all() -> list[dict[str, object]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="vision_attn-untrusted-") as tmp:
        folder = Path(tmp)
        files = write_files(folder)
        _warm_up()
        for label, named, call in scenarios(files, folder):
            before = set(os.listdir(folder))
            rss = _maxrss_mb()
            err = io.StringIO()
            start = time.perf_counter()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                status = call()
            seconds = time.perf_counter() - start
            results.append({"scenario": label, "file": named, "status": status, "seconds": round(seconds, 3),
                            "rss_growth_mb": round(_maxrss_mb() - rss, 1), "stderr": err.getvalue(),
                            "new_files": sorted(set(os.listdir(folder)) - before)})
    return results


def run(p, record) -> None:
    results = record.results["scenarios"] = run_all()
    record.table(["scenario", "exit", "seconds", "resident set growth (MB)", "new files"],
                 [[r["scenario"], r["status"], f"{r['seconds']:.3f}", f"{r['rss_growth_mb']:.1f}",
                   ", ".join(r["new_files"]) or "none"] for r in results])
    for r in results:
        record.line(f"{r['scenario']}: {str(r['stderr']).strip()}")


SUITE = Suite("untrusted-inputs", "hostile files (alias bombs, deep nesting, a 50 MB config) refused by every command",
              run, group="check", doc=__doc__)
