"""What every benchmark suite shares: its declaration (:class:`Suite`, :class:`Param`), the timing of
variants in alternating rounds in one process (:func:`alternate`), fresh processes for measurements
that need one (:func:`in_fresh_process`), the record of the machine (:func:`environment`), and the
result (:class:`Record`: Markdown tables on stdout, one JSON file written atomically).

A suite declares its parameters; ``tools/bench.py`` turns them into options (``--img-size 160``), and
``--quick`` replaces each default by its ``quick`` value (small sizes, one or two rounds: seconds, to
check that the suite runs, never a figure to quote).
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[2]
UNSET: Any = object()
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time,
                                          "thread": time.thread_time}


@dataclass(frozen=True)
class Param:
    """One option of a suite: ``name`` with underscores (``img_size`` is ``--img-size``); its type is
    the default's (a list default: one or more values; a bool default: a flag); ``quick``: the value
    under ``--quick`` (unset: the default)."""

    name: str
    default: Any
    help: str = ""
    choices: Sequence[Any] | None = None
    quick: Any = UNSET
    type: Callable[[str], Any] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class Suite:
    """A benchmark: ``run(p, record)`` measures with the parameters ``p`` (a namespace of the
    :class:`Param` values) and puts what it measured in ``record``. ``group``: ``cpu`` (``make
    benchmark`` runs them all), ``gpu``, or ``check`` (not timings to quote); ``requires``: the
    modules it imports beyond vision_attn's dependencies (the suite is refused, or skipped in a group,
    where one is missing)."""

    name: str
    help: str
    run: Callable[[Any, "Record"], None]
    params: tuple[Param, ...] = ()
    group: str = "cpu"
    requires: tuple[str, ...] = ()
    doc: str = ""

    def missing(self) -> list[str]:
        import importlib.util

        return [m for m in self.requires if importlib.util.find_spec(m) is None]


# ---------------------------------------------------------------------------------------------- timing

def alternate(fns: dict[str, Callable[[], object]], rounds: int, *, iters: int = 1,
              clock: Callable[[], float] = time.perf_counter, warmup_calls: int = 0, warmup_rounds: int = 0,
              rotate: bool = False, log: Callable[[str], None] | None = None) -> dict[str, list[float]]:
    """Seconds per call of each of ``fns`` in each of ``rounds`` rounds of ``iters`` calls, in one
    process on the same inputs. The order changes every round: reversed every other round, or rotated
    by one (``rotate``, for more than two variants). ``warmup_calls`` untimed calls of each first,
    then ``warmup_rounds`` rounds that are timed the same way and dropped.

    ``clock``: wall time by default; with one torch thread, ``time.thread_time`` (``CLOCKS["thread"]``)
    or ``time.process_time`` count only this process's CPU time, which other processes cannot inflate."""
    names = list(fns)
    for _ in range(warmup_calls):
        for name in names:
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup_rounds + rounds):
        if rotate:
            order = names[r % len(names):] + names[:r % len(names)]
        else:
            order = names if r % 2 == 0 else names[::-1]
        row = {}
        for name in order:
            start = clock()
            for _ in range(iters):
                fns[name]()
            row[name] = (clock() - start) / iters
        if r >= warmup_rounds:
            for name in names:
                times[name].append(row[name])
        if log:
            log(f"round {r}{' (warm-up)' if r < warmup_rounds else ''}: "
                + "  ".join(f"{n} {1e3 * row[n]:.2f} ms" for n in names))
    return times


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def median_ms(times: dict[str, list[float]]) -> dict[str, float]:
    """The median of each variant's seconds per call, in milliseconds."""
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}


def median_ratio(times: dict[str, list[float]], num: str, den: str) -> float:
    """The median over rounds of ``times[num] / times[den]`` (each round's two figures taken together)."""
    return statistics.median(a / b for a, b in zip(times[num], times[den]))


def log(text: str) -> None:
    """Progress on stderr (stdout holds the tables)."""
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------- fresh processes

def in_fresh_process(fn: Callable[..., Any], *args: Any, env: dict[str, str] | None = None) -> Any:
    """``fn(*args)`` in a new Python process (a module-level function of a suite; JSON arguments and
    result): for memory figures that must not see this process's allocations, or start-up costs."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import importlib; "
            "fn = getattr(importlib.import_module(sys.argv[2]), sys.argv[3]); "
            "print('\\nRESULT ' + json.dumps(fn(*json.loads(sys.argv[4]))))")
    cmd = [sys.executable, "-c", code, str(ROOT), fn.__module__, fn.__qualname__, json.dumps(list(args))]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"{fn.__module__}.{fn.__qualname__}{args!r} in a fresh process exited "
                           f"{done.returncode}:\n{done.stderr[-3000:]}")
    line = next(line for line in reversed(done.stdout.splitlines()) if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


# ------------------------------------------------------------------------------------- environment

def _cpuinfo() -> tuple[str, set[str]]:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return model, flags


def environment() -> dict[str, Any]:
    """The machine and software a figure was measured on: CPU model and its vector and matrix
    instructions (AVX2, AVX-512, AMX), CPUs, torch threads, library versions, the checkout's commit."""
    import importlib.metadata as md

    import torch

    model, flags = _cpuinfo()
    isa = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
    versions = {}
    for dist in ("torch", "torchvision", "timm", "onnxruntime", "openvino", "ultralytics", "vision_attn"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    return {
        "cpu": model, "cpus": os.cpu_count(), "cpus_usable": affinity,
        "isa": {k: k in flags for k in isa}, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "python": platform.python_version(), "platform": platform.platform(),
        "torch": torch.__version__, "versions": versions, "commit": commit,
    }


# ------------------------------------------------------------------------------------------ output

def markdown(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; a column whose cells are all numbers is right-aligned."""
    def number(cell: Any) -> bool:
        text = str(cell).replace(",", "").rstrip("x%").strip()
        try:
            float(text)
            return True
        except ValueError:
            return text in ("n/a", "")
    rule = ["---:" if rows and all(number(r[i]) for r in rows) else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(map(str, headers)) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines)


@dataclass
class Record:
    """What one suite run measured: ``results`` (JSON-able), printed tables and lines, and the
    JSON file (``--json``): suite, command, parameters, environment, results; written atomically
    when the suite ends and whenever the suite calls :meth:`save` (a run stopped at a time limit
    keeps what it had measured)."""

    suite: str
    params: dict[str, Any]
    command: str
    json_path: str | None = None
    results: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)

    def add(self, key: str, row: Any) -> Any:
        """Append ``row`` to the list ``results[key]``."""
        self.results.setdefault(key, []).append(row)
        return row

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> None:
        if title:
            print(title + "\n")
        print(markdown(headers, rows) + "\n", flush=True)

    def line(self, text: str = "") -> None:
        print(text, flush=True)

    def document(self) -> dict[str, Any]:
        return {"suite": self.suite, "command": self.command, "params": self.params,
                "environment": environment(), "seconds": round(time.time() - self.started, 1),
                "results": self.results}

    def save(self) -> None:
        if self.json_path:
            from vision_attn.io.atomic import write_text

            write_text(self.json_path, json.dumps(self.document(), indent=2, default=_plain) + "\n", mkdir=True)


def _plain(value: Any) -> Any:
    """numpy and torch scalars, paths and tuples as JSON values."""
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def command_line(suite: str, argv: Sequence[str]) -> str:
    return shlex.join(["python", "tools/bench.py", suite, *argv])
