"""How the self-checks time kernels: the fastest of alternating rounds, and the size where two kernels cross."""
from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Callable, Iterator

import torch
from torch.utils._python_dispatch import _disable_current_modes

__all__ = ["fastest_seconds", "round_seconds", "crossover", "self_check_clock", "self_check_context"]


@contextlib.contextmanager
def self_check_context() -> Iterator[None]:
    """Where the self-checks run: no autograd, no autocast, no inference mode, no active dispatch
    mode (whatever context the first call that triggers them is in, they measure the kernels themselves)."""
    with (torch.inference_mode(False), torch.no_grad(), torch.autocast("cpu", enabled=False),
          _disable_current_modes()):
        yield


def self_check_clock(threads: int) -> Callable[[], float]:
    """The clock a self-check times with: CPU time of the thread with one thread (immune to preemption)."""
    return time.thread_time if threads == 1 else time.perf_counter


def round_seconds(calls: dict[str, Callable[[], Any]], rounds: int,
                  clock: Callable[[], float] = time.perf_counter, repeat: int = 1) -> dict[str, list[float]]:
    """name -> the seconds of one ``calls[name]()`` (timed ``repeat`` calls at a time) in each of
    ``rounds`` rounds, the order of the calls reversed every other round."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(rounds):
        for name in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
            start = clock()
            for _ in range(repeat):
                calls[name]()
            times[name].append((clock() - start) / repeat)
    return times


def fastest_seconds(calls: dict[str, Callable[[], Any]], rounds: int,
                    clock: Callable[[], float] = time.perf_counter, repeat: int = 1) -> dict[str, float]:
    """name -> seconds of one ``calls[name]()`` in its fastest of :func:`round_seconds`' rounds. The
    fastest round, not the median: other work on the machine only ever adds time, and with several
    threads it adds most to the kernel of more, smaller calls (each a barrier that waits for a
    descheduled thread), so a median taken on a busy machine can choose the slower kernel (2 threads,
    bf16 attention: the median chose the fused kernel, 2x slower than the explicit one on the idle
    machine)."""
    return {name: min(t) for name, t in round_seconds(calls, rounds, clock, repeat).items()}


def crossover(small: dict[str, float], large: dict[str, float], small_macs: int, large_macs: int) -> int:
    """The multiply-adds from which oneDNN is faster, for a product whose oneDNN kernel won at
    ``large_macs``: each kernel's time fitted as a fixed cost plus a cost per multiply-add through its
    times (seconds, ``{"aten": .., "onednn": ..}``) at the two sizes, and the lines intersected; 0
    where oneDNN also won the small size."""
    lead_small = small["aten"] - small["onednn"]  # oneDNN's lead, linear in the size
    lead_large = large["aten"] - large["onednn"]
    if not lead_large > 0:
        raise ValueError(f"oneDNN did not win at {large_macs} multiply-adds: there is no size from which it is faster")
    if lead_small > 0:
        return 0
    return math.ceil(small_macs + -lead_small * (large_macs - small_macs) / (lead_large - lead_small))
