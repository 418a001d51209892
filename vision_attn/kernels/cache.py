"""The measured kernel choices kept on disk: one JSON file in the cache folder, one entry per key."""
from __future__ import annotations

import platform
from pathlib import Path
from typing import Any, Callable

import torch

from vision_attn.errors import VisionAttnError
from vision_attn.io.atomic import write_json
from vision_attn.io.cache import cache_dir
from vision_attn.io.json import read_json

__all__ = ["PLANS_FILE", "plan_key", "cached_measurement"]

PLANS_FILE = "kernel_choices.json"
"""The measured choices, in :func:`~vision_attn.io.cache.cache_dir`: one entry per kernel family,
torch version, CPU, thread count, dtype and timing method."""

METHOD = "fastest round"
"""How the stored choices were timed (:func:`~vision_attn.kernels.timing.fastest_seconds`), part of
every key: choices timed another way (the median of rounds, before 2026-12-04) are measured again."""


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def plan_key(family: str, dtype: torch.dtype, threads: int) -> str:
    """What a measured choice depends on: the kernel family, torch version, CPU, thread count, dtype
    and how it was timed."""
    return (f"{family}; torch {torch.__version__}; {_cpu_name()}; {torch.backends.cpu.get_cpu_capability()}; "
            f"{threads} threads; {str(dtype).removeprefix('torch.')}; {METHOD}")


def _read(path: Path) -> dict[str, Any]:
    """The stored choices; an unreadable, damaged or oversized file counts as none (measured again)."""
    try:
        plans = read_json(path, what="kernel choices", max_bytes=1 << 20)
    except (VisionAttnError, OSError):
        return {}
    return plans if isinstance(plans, dict) else {}


def cached_measurement(key: str, measure: Callable[[], dict[str, Any]], valid: Callable[[Any], bool],
                       keep: Callable[[dict[str, Any]], bool] = lambda entry: True) -> dict[str, Any]:
    """The entry stored under ``key`` in :data:`PLANS_FILE` if ``valid`` accepts it; else ``measure()``,
    added to the file when ``keep`` accepts it (written atomically; a cache that cannot be written is
    skipped)."""
    path = cache_dir() / PLANS_FILE
    entry = _read(path).get(key)
    if valid(entry):
        return entry
    entry = measure()
    if not keep(entry):
        return entry
    try:
        write_json(path, {**_read(path), key: entry}, mkdir=True)
    except OSError:
        pass
    return entry
