"""Shared helpers of the benchmark tools: alternating timing, peak tensor memory, resident set.

The machine these benchmarks run on is noisy (the same run differs by 25% between processes), so
two implementations are compared in one process, alternating their order every round, and the
figure to quote is the median over rounds of their ratio.
"""
from __future__ import annotations

import os
import statistics
import threading
import time
import weakref
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def rss_mb() -> float:
    """Resident set of this process, MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def rss_rise_mb(fn: Callable[[], object]) -> float:
    """Steady-state rise of the resident set while ``fn()`` runs: call it once first (kernels
    selected, caches filled), then sample the resident set from a thread during a second call."""
    fn()
    before = rss_mb()
    return _peak_rss_during(fn) - before


def rss_peak_mb(fn: Callable[[], object], calls: int = 2) -> float:
    """Peak of the resident set above its level before the first call, over ``calls`` calls of
    ``fn()`` (sampled from a thread). Unlike :func:`rss_rise_mb` it does not depend on how much
    memory the allocator kept between calls, which differs between implementations in training."""
    before = rss_mb()

    def run() -> None:
        for _ in range(calls):
            fn()

    return _peak_rss_during(run) - before


def _peak_rss_during(fn: Callable[[], object]) -> float:
    """Highest resident set (MiB) seen by a thread sampling every 0.1 ms while ``fn()`` runs."""
    peak, done = [0.0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb())
            time.sleep(1e-4)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        fn()
    finally:
        done.set()
        sampler.join()
    return max(peak[0], rss_mb())


class PeakTensorMemory(TorchDispatchMode):
    """Peak bytes of live tensor storage created by the ops run inside the mode (deterministic,
    unlike the resident set): each op output's storage counts from its creation until the last
    Python tensor viewing it is freed. Tensors made before the mode (weights, inputs) do not count."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list[int]] = {}  # data_ptr -> [bytes, tensors alive]
        self.current = self.peak = 0

    def _release(self, ptr: int) -> None:
        self.live[ptr][1] -= 1
        if self.live[ptr][1] == 0:
            self.current -= self.live.pop(ptr)[0]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                ptr = storage.data_ptr()
                if ptr not in self.live:
                    self.live[ptr] = [storage.nbytes(), 0]
                    self.current += storage.nbytes()
                    self.peak = max(self.peak, self.current)
                self.live[ptr][1] += 1
                weakref.finalize(t, self._release, ptr)
        return out


def tensor_peak_mb(fn: Callable[[], object]) -> float:
    """Peak live tensor storage (MiB) of the ops ``fn()`` runs, forward and backward alike."""
    with PeakTensorMemory() as mem:
        fn()
    return mem.peak / 2**20


def alternate(steps: dict[str, Callable[[], object]], rounds: int, iters: int, items: int,
              log: Callable[[str], None] | None = None,
              clock: Callable[[], float] = time.perf_counter) -> list[dict[str, float]]:
    """Time each step ``iters`` times a round, alternating the order every round; returns one dict
    of items per second per step and round (``items`` per call: the batch size).

    ``clock``: wall time by default. With one torch thread, ``time.thread_time`` (the CPU time of the
    calling thread, where all the work then runs) is immune to other processes taking the core away."""
    names = list(steps)
    rows = []
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        row = {}
        for name in order:
            start = clock()
            for _ in range(iters):
                steps[name]()
            row[name] = iters * items / (clock() - start)
        rows.append(row)
        if log:
            log(f"round {r}: " + "  ".join(f"{n} {row[n]:.2f}/s" for n in names))
    return rows


def median_ratio(rows: list[dict[str, float]], a: str, b: str) -> float:
    """Median over rounds of rows[a] / rows[b]."""
    return statistics.median(r[a] / r[b] for r in rows)
