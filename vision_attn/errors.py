"""The exception types every layer of vision_attn raises.

Each message says what was wrong, where (file, row, key, image or tensor) and how to fix it.
The command line prints the message on one line and exits with status 2.
"""
from __future__ import annotations

import re

__all__ = ["VisionAttnError", "ConfigError", "DataError", "CheckpointError", "TrainingError", "TrainingStopped",
           "ExportError", "WriteError", "worker_message"]

_WORKER_WRAPPED = re.compile(r"^Caught (\w+) in DataLoader worker process \d+\.")


class VisionAttnError(Exception):
    """Base class: anything vision_attn reports about the user's input."""


class ConfigError(VisionAttnError, ValueError):
    """A configuration is wrong: an unknown name, an argument out of range, a bad YAML row."""


class DataError(VisionAttnError, ValueError):
    """Input data is wrong: an image or tensor of the wrong shape, a bad annotation, a missing file."""


class CheckpointError(VisionAttnError, RuntimeError):
    """A checkpoint file cannot be read or does not fit the model it is loaded into."""


class TrainingError(VisionAttnError, RuntimeError):
    """Training cannot go on: a loss that is NaN or infinite, a run folder in the way of a new run."""


class TrainingStopped(TrainingError):
    """Training stopped on a signal (SIGTERM, Ctrl-C, a requeue signal) after writing a checkpoint of
    the step it reached; the command line prints the message and exits with ``exit_status`` (75)."""

    exit_status = 75


class ExportError(VisionAttnError, RuntimeError):
    """An exported model does not reproduce PyTorch's outputs within tolerance, or cannot be run."""


class WriteError(VisionAttnError, OSError):
    """A file cannot be written: the disk is full, its folder was removed or cannot be written."""


def worker_message(exc: BaseException) -> str | None:
    """The worker's own message of an exception that a DataLoader raised again in the main process (the
    same type, its message the worker's traceback); None for any other exception."""
    text = str(exc)
    if not _WORKER_WRAPPED.match(text):
        return None
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ in ("builtins", "__main__") else f"{kind.__module__}.{kind.__qualname__}"
    last = text.rfind(f"{name}: ")  # the traceback's last line, as the traceback module writes it
    return text[last + len(name) + 2:].strip() if last >= 0 else text.splitlines()[-1].strip()
