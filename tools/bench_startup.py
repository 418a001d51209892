"""Start-up time of the ``vision-attn`` command, measured as a new user meets it: each command in a fresh
process, N runs, the median and the minimum wall time, printed as a Markdown table.

    python tools/bench_startup.py                    # the installed entry point beside this python
    python tools/bench_startup.py -n 7
    PYTHONPATH=/other/checkout python tools/bench_startup.py --module   # `python -m vision_attn` instead

``python -c "import torch"`` is the floor that the commands needing torch are measured against, and
``python -c "import torch._dynamo"`` the floor of those that count a model's FLOPs: torch imports
dynamo itself the first time an operation runs under its FLOP counter (``torch.utils.flop_counter``) or
a meta-device kernel written in Python runs (``torch._refs``, wrapped by ``torch._compile``), and
torchvision imports it too. Every command's output goes to /dev/null; a command that fails is reported
(its exit status) rather than timed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

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


def time_runs(argv: list[str], n: int, env: dict[str, str]) -> list[float]:
    """Wall seconds of ``n`` fresh runs of ``argv`` (output discarded)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        out.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=7, help="runs per command (default 7)")
    parser.add_argument("--module", action="store_true", help="run `python -m vision_attn` (honours PYTHONPATH)")
    args = parser.parse_args()
    env = dict(os.environ, COLUMNS="200")
    where = subprocess.run([sys.executable, "-c", "import vision_attn; print(vision_attn.__file__)"],
                           capture_output=True, text=True, env=env, check=True).stdout.strip()
    print(f"vision_attn from {where}; python {sys.executable}; {args.n} runs each, {os.cpu_count()} CPUs\n")
    rows = [(f"python -c \"import {m}\"", time_runs([sys.executable, "-c", f"import {m}"], args.n, env))
            for m in ("torch", "torch._dynamo")]
    base = entry_point(args.module)
    label = "python -m vision_attn" if args.module else "vision-attn"
    for name, argv in COMMANDS:
        rows.append((f"{label} {name}", time_runs(base + argv, args.n, env)))
    print("| command | median s | min s |")
    print("|---|---:|---:|")
    for name, times in rows:
        print(f"| `{name}` | {statistics.median(times):.2f} | {min(times):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
