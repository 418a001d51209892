"""Which aten ops a call runs: for tests that check which kernel path a layer took."""
from __future__ import annotations

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
