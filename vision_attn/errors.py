"""The exception types every layer of vision_attn raises.

Each message says what was wrong, where (file, row, key, image or tensor) and how to fix it.
The command line prints the message on one line and exits with status 2.
"""
from __future__ import annotations

__all__ = ["VisionAttnError", "ConfigError", "DataError", "CheckpointError", "TrainingError", "TrainingStopped", "ExportError"]


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
