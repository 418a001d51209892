"""Files written frame by frame, never seen half-written: an annotated video and a JSON Lines file.

Each writes to a :class:`~vision_attn.io.atomic.PendingFile` beside its target and renames it at
:meth:`commit`; :meth:`abort` (or an exception inside the ``with`` block) removes it, so a reader
finds the finished file or none. Videos are written by OpenCV: ``.mp4`` as MPEG-4 Part 2 (``mp4v``),
``.avi`` as Motion JPEG, the two codecs every OpenCV build can encode.
"""
from __future__ import annotations

import abc
import json
import os
from pathlib import Path
from typing import Any, TextIO

import cv2
import numpy as np

from vision_attn.errors import ConfigError, WriteError
from vision_attn.io.atomic import PendingFile

__all__ = ["VideoWriter", "JsonLinesWriter", "VIDEO_CODECS"]

VIDEO_CODECS = {".mp4": "mp4v", ".avi": "MJPG"}


class _Pending(abc.ABC):
    """The commit/abort life of one pending file, and the ``with`` protocol (abort on an exception)."""

    pending: PendingFile

    @abc.abstractmethod
    def _close(self) -> None:
        """Close the writer's own handle (idempotent: :meth:`abort` may follow a failed commit)."""

    def commit(self) -> Path:
        """Finish the file and rename it to its target."""
        try:
            self._close()
        except OSError as e:
            self.pending.abort()
            raise self.pending.failure(e) from None
        return self.pending.commit()

    def abort(self) -> None:
        """Close and remove the temporary file; the target is as it was."""
        try:
            self._close()
        finally:
            self.pending.abort()

    def __enter__(self):  # noqa: ANN204 - the writer itself
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            self.abort()


class VideoWriter(_Pending):
    """Frames (H, W, 3) uint8 RGB written to ``path`` (``.mp4`` or ``.avi``) at ``fps``; the size is the
    first frame's and every later frame must have it."""

    def __init__(self, path: str | os.PathLike, fps: float) -> None:
        path = Path(path)
        codec = VIDEO_CODECS.get(path.suffix.lower())
        if codec is None:
            raise ConfigError(f"{path}: videos are written as {' or '.join(VIDEO_CODECS)}; choose one of those")
        self.fps, self.codec, self.frames = float(fps), codec, 0
        self.size: tuple[int, int] | None = None
        self._writer: cv2.VideoWriter | None = None
        self.pending = PendingFile(path, suffix=path.suffix, mkdir=True, error=WriteError)

    def write(self, frame: np.ndarray) -> None:
        """Append one frame."""
        h, w = frame.shape[:2]
        if self._writer is None:
            self.size = (w, h)
            self._writer = cv2.VideoWriter(self.pending.tmp, cv2.VideoWriter_fourcc(*self.codec), self.fps, (w, h))
            if not self._writer.isOpened():
                raise WriteError(f"{self.pending.path}: OpenCV cannot write {self.codec} video of {w}x{h} here")
        elif (w, h) != self.size:
            raise WriteError(f"{self.pending.path}: frame {self.frames} is {w}x{h}, the video {self.size[0]}x"
                             f"{self.size[1]}; a video's frames share a size")
        self._writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
        self.frames += 1

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None


class JsonLinesWriter(_Pending):
    """One JSON object per line to ``path``."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.pending = PendingFile(path, suffix=".jsonl", mkdir=True, error=WriteError)
        self._file: TextIO | None = open(self.pending.tmp, "w", encoding="utf-8")
        self.records = 0

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one line."""
        assert self._file is not None, "written after commit or abort"
        try:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        except OSError as e:
            self.abort()
            raise self.pending.failure(e) from None
        self.records += 1

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
