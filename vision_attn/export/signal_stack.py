"""A signal stack that OpenVINO's CPU plugin cannot leave dangling.

Each instance of OpenVINO's CPU plugin (one per ``ov.Core`` that uses the CPU: ours, and those NNCF
creates inside ``nncf.quantize``) maps its own alternate signal stack for the thread that created it,
and on destruction unmaps it after restoring the stack it replaced, if its own is still the current
one (``SigAltStackSetup`` in the plugin, 2025.x-2026.x). Two plugins released out of order leave the
thread's alternate stack pointing at unmapped memory: plugin A replaces the original stack, B replaces
A's, A is released (its stack unmapped), then B restores A's. The next signal with a handler on that
thread (every Python handler is installed with ``SA_ONSTACK``: Ctrl-C, SIGTERM, the SIGCHLD handler of
a DataLoader with workers) cannot be delivered and the process dies of SIGSEGV, with no traceback.

:func:`kept_signal_stack` wraps every call that may create a CPU plugin: afterwards the thread's
alternate stack is one of ours, 64 KiB (more than the x86 signal frame with AMX tile state needs, the
reason the plugin swaps stacks at all), kept for the thread's life. No plugin's stack is then current
when that plugin is released, so no release restores anything. Linux only; elsewhere a no-op.
"""
from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
from typing import Iterator

__all__ = ["kept_signal_stack", "signal_stack"]

STACK_BYTES = 1 << 16


class _Stack(ctypes.Structure):  # stack_t of <signal.h> on Linux
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]


_ours = threading.local()  # this thread's buffer and its stack_t, kept while the thread lives
_SS_DISABLE = 2


def _sigaltstack(new: _Stack | None, old: _Stack | None) -> int:
    libc = ctypes.CDLL(None, use_errno=True)  # the loaded C library (cached by the loader)
    return libc.sigaltstack(None if new is None else ctypes.byref(new), None if old is None else ctypes.byref(old))


def signal_stack() -> tuple[int, int]:
    """The calling thread's alternate signal stack: (address, size); (0, 0) when it has none."""
    if sys.platform != "linux":
        return 0, 0
    current = _Stack()
    if _sigaltstack(None, current) != 0 or current.ss_flags & _SS_DISABLE:
        return 0, 0
    return current.ss_sp or 0, current.ss_size


def _install() -> None:
    if not hasattr(_ours, "stack"):
        _ours.buffer = ctypes.create_string_buffer(STACK_BYTES)
        _ours.stack = _Stack(ctypes.cast(_ours.buffer, ctypes.c_void_p), 0, STACK_BYTES)
    if signal_stack()[0] != _ours.stack.ss_sp:
        _sigaltstack(_ours.stack, None)  # fails (harmlessly) only inside a signal handler on that stack


@contextlib.contextmanager
def kept_signal_stack() -> Iterator[None]:
    """Run the block (an OpenVINO compile, an NNCF quantization), then give the thread our own
    alternate signal stack back, whatever the block's plugins did to it."""
    try:
        yield
    finally:
        if sys.platform == "linux":
            _install()
