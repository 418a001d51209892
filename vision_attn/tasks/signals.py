"""Stop requests from signals: SIGTERM (a scheduler's or a spot instance's notice), the first Ctrl-C
(SIGINT) and SIGUSR1 (the requeue signal of Lightning's SLURM environment) ask training to stop at the
start of its next batch, after writing a checkpoint of that step (:mod:`vision_attn.tasks.checkpointer`);
a second Ctrl-C stops at once. ``vision-attn train`` then exits with :data:`EXIT_STOPPED`."""
from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Callable

from vision_attn.data.loader import STOP_SIGNALS
from vision_attn.errors import TrainingStopped

__all__ = ["StopRequest", "EXIT_STOPPED", "STOP_SIGNALS"]

EXIT_STOPPED = TrainingStopped.exit_status  # 75, EX_TEMPFAIL: run the same command with --resume true


class StopRequest:
    """Signal handlers that record a request to stop (:attr:`signum`); :meth:`install` while training
    runs, :meth:`uninstall` after (the previous handlers come back). ``on_request(signum)``, when given,
    is called on each request (an ablation passes the stop on to the trainings it runs)."""

    def __init__(self, signals: tuple[signal.Signals, ...] = STOP_SIGNALS,
                 on_request: Callable[[int], None] | None = None) -> None:
        self.signals = signals
        self.on_request = on_request
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

    def uninstall(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.signum is not None:  # a second Ctrl-C: stop now
            self.uninstall()
            raise KeyboardInterrupt
        self.signum = signum
        if self.on_request is not None:
            self.on_request(signum)
