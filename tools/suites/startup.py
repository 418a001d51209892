"""Start-up time of the ``vision-attn`` command, measured as a new user meets it: each command in a fresh
process, N runs, the median and the minimum wall time and the median CPU time (user + system seconds of
the child process, from ``getrusage(RUSAGE_CHILDREN)``: on a shared machine far less sensitive to other
load than wall time), printed as a Markdown table.

    python tools/bench.py startup --runs 5              # the installed entry point beside this python
    PYTHONPATH=/other/checkout python tools/bench.py startup --module   # `python -m vision_attn` instead

``python -c "import torch"`` is the floor that the commands needing torch are measured against, and
``python -c "import torch._dynamo"`` what a command would cost that let torch import its compiler
stack: torch imports dynamo itself the first time an operation runs under a ``TorchDispatchMode`` (its
``FlopCounterMode`` included) or a meta-device kernel written in Python runs (``torch._refs``, wrapped
by ``torch._compile``), and torchvision imports it too; the counting commands avoid all three
(``vision_attn.analysis.meta_shapes``). Every command's output goes to /dev/null; a command that fails is reported
(its exit status) rather than timed.
"""
from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tools.suites.harness import Param, Suite

COMMANDS: list[tuple[str, list[str]]] = [
    ("--help", ["--help"]),
    ("configs", ["configs"]),
    ("yaml info yolov8n.yaml", ["yaml", "info", "yolov8n.yaml"]),
    ("flops vit_tiny_patch16_224 --img-size 224", ["flops", "vit_tiny_patch16_224", "--img-size", "224"]),
    ('models "deit_*"', ["models", "deit_*"]),
]


def entry_point(module: bool) -> list[str]:
    """How to start the command: ``python -m vision_attn``, or the installed ``vision-attn`` script."""
    if module:
        return [sys.executable, "-m", "vision_attn"]
    script = Path(sys.executable).parent / "vision-attn"
    if not script.exists():
        raise SystemExit(f"{script}: no vision-attn entry point beside this python; use --module")
    return [str(script)]


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_runs(argv: list[str], n: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    """Wall seconds and CPU seconds of ``n`` fresh runs of ``argv`` (output discarded)."""
    wall, cpu = [], []
    for _ in range(n):
        c0, t0 = _children_cpu(), time.perf_counter()
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        wall.append(time.perf_counter() - t0)
        cpu.append(_children_cpu() - c0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    return wall, cpu


def run(p, record) -> None:
    env = dict(os.environ, COLUMNS="200")
    where = subprocess.run([sys.executable, "-c", "import vision_attn; print(vision_attn.__file__)"],
                           capture_output=True, text=True, env=env, check=True).stdout.strip()
    record.results["vision_attn"] = where
    record.line(f"vision_attn from {where}; python {sys.executable}; {p.runs} runs each, {os.cpu_count()} CPUs\n")
    rows = [(f"python -c \"import {m}\"", time_runs([sys.executable, "-c", f"import {m}"], p.runs, env))
            for m in p.floors]
    base = entry_point(p.module)
    label = "python -m vision_attn" if p.module else "vision-attn"
    for name, argv in COMMANDS[:p.commands]:
        rows.append((f"{label} {name}", time_runs(base + argv, p.runs, env)))
    for name, (wall, cpu) in rows:
        record.add("rows", {"command": name, "median_s": statistics.median(wall), "min_s": min(wall),
                            "median_cpu_s": statistics.median(cpu)})
    record.table(["command", "median s", "min s", "median CPU s"],
                 [[f"`{name}`", f"{statistics.median(wall):.2f}", f"{min(wall):.2f}", f"{statistics.median(cpu):.2f}"]
                  for name, (wall, cpu) in rows])


SUITE = Suite("startup", "start-up time of the vision-attn command, each command in a fresh process", run, (
    Param("runs", 7, "runs per command", quick=1),
    Param("module", False, "run `python -m vision_attn` (honours PYTHONPATH)"),
    Param("floors", ["torch", "torch._dynamo"], "modules whose bare import is timed as a floor", quick=["torch"]),
    Param("commands", len(COMMANDS), "how many of the commands to time", quick=1),
), doc=__doc__)
