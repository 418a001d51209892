"""Stop requests from signals: SIGTERM (a scheduler's or a spot instance's notice), the first Ctrl-C
(SIGINT) and SIGUSR1 (the requeue signal of Lightning's SLURM environment) ask training to stop at the
start of its next batch, after writing a checkpoint of that step (:mod:`vision_attn.tasks.checkpointer`);
a second Ctrl-C stops at once. ``vision-attn train`` then exits with :data:`EXIT_STOPPED`.

A run that does not reach its next batch within the grace period after the signal (a worker stuck in
a dataset, a hung file system) is ended there: a :class:`~vision_attn.errors.TrainingError` that says
where it was waiting, raised in the main thread by a timer (SIGALRM); its last checkpoint stays as it
was."""
from __future__ import annotations

import os
import signal
import threading
import traceback
from types import FrameType
from typing import Any, Callable

from vision_attn.data.loader import STOP_SIGNALS
from vision_attn.errors import TrainingError, TrainingStopped

__all__ = ["StopRequest", "EXIT_STOPPED", "STOP_SIGNALS", "STOP_GRACE_S"]

EXIT_STOPPED = TrainingStopped.exit_status  # 75, EX_TEMPFAIL: run the same command with --resume true
STOP_GRACE_S = 20.0  # SLURM's default KillWait (SIGTERM to SIGKILL) is 30 s
_LOADER = os.path.join("torch", "utils", "data", "dataloader.py")


def waiting_where(frame: FrameType | None) -> str:
    """Where the main thread is (``frame``, as a signal handler sees it), in words."""
    stack = traceback.extract_stack(frame) if frame is not None else []
    if any(f.filename.endswith(_LOADER) for f in stack):
        return "waiting for a batch from the data loader (a dataset's __getitem__ has not returned)"
    if not stack:
        return "at an unknown place"
    inner = stack[-1]
    return f"in {inner.name} ({inner.filename}:{inner.lineno})"


class StopRequest:
    """Signal handlers that record a request to stop (:attr:`signum`); :meth:`install` while training
    runs, :meth:`uninstall` after (the previous handlers come back). ``on_request(signum)``, when given,
    is called on each request (an ablation passes the stop on to the trainings it runs)."""

    def __init__(self, signals: tuple[signal.Signals, ...] = STOP_SIGNALS,
                 on_request: Callable[[int], None] | None = None, grace_s: float | None = STOP_GRACE_S) -> None:
        self.signals = signals
        self.on_request = on_request
        self.grace_s = grace_s  # None: wait for the next batch however long it takes
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread() or self._previous:
            return
        for s in self.signals:
            self._previous[s] = signal.signal(s, self._handle)
        if self.grace_s is not None:
            self._previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._overdue)

    def uninstall(self) -> None:
        if self._previous and self.grace_s is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for s, handler in self._previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.signum is not None:  # a second Ctrl-C: stop now
            self.uninstall()
            raise KeyboardInterrupt
        if self.signum is None and self.grace_s is not None:
            signal.setitimer(signal.ITIMER_REAL, self.grace_s)
        self.signum = signum
        if self.on_request is not None:
            self.on_request(signum)

    def _overdue(self, signum: int, frame: FrameType | None) -> None:
        name = self.name
        self.uninstall()
        raise TrainingError(f"stopped by {name}: the next training batch did not start within {self.grace_s:g} s of "
                            f"the signal, {waiting_where(frame)}; the run's last checkpoint is left as it was")
