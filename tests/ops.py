"""For tests that check which kernel path a layer took: the aten ops a call runs, and what code
prints in a fresh process with the CPU fast paths switched off from the environment."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable

from torch.utils._python_dispatch import TorchDispatchMode


class OpLog(TorchDispatchMode):
    """Records the name of every op dispatched inside the ``with`` block in ``ops``."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func._overloadpacket))
        return func(*args, **(kwargs or {}))


def ops_of(fn: Callable[[], object]) -> list[str]:
    """The ops ``fn()`` dispatches, in order."""
    with OpLog() as log:
        fn()
    return log.ops


def printed_with_fast_paths_off(code: str) -> list[str]:
    """The words ``code`` prints, run by a new Python process with ``VISION_ATTN_KERNELS=aten`` (the
    kernel plan of PyTorch's standard kernels: every CPU fast path off; the variable is read at the
    process's first :func:`~vision_attn.kernels.current_plan`)."""
    env = {**os.environ, "VISION_ATTN_KERNELS": "aten"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
