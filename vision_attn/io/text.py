"""Bounded reading of line-oriented text files (YOLO label files, image lists): a file or a line
larger than any real one is an error naming the file and line, read without holding more than the
bound in memory."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from vision_attn.errors import DataError

__all__ = ["MAX_LINE_CHARS", "MAX_TEXT_BYTES", "read_lines"]

MAX_LINE_CHARS = 1 << 17      # 131,072: a polygon of 5,000 points takes about 90,000 characters
MAX_TEXT_BYTES = 256 << 20


def read_lines(path: str | os.PathLike, *, max_line: int = MAX_LINE_CHARS, max_bytes: int = MAX_TEXT_BYTES,
               what: str = "text file") -> Iterator[tuple[int, str]]:
    """``(line number, line)`` for each line of ``path`` (newline stripped); a :class:`DataError`
    naming the file and line when a line is longer than ``max_line`` characters, or the file larger
    than ``max_bytes``."""
    path = Path(path)
    size = path.stat().st_size
    if size > max_bytes:
        raise DataError(f"{what} {path}: {size:,} bytes is over the limit of {max_bytes:,} bytes")
    with path.open(encoding="utf-8", errors="strict", newline=None) as f:
        n = 0
        while True:
            try:
                line = f.readline(max_line + 1)
            except UnicodeDecodeError as e:
                raise DataError(f"{what} {path}, after line {n}: not UTF-8 text (byte {e.start}); save it as "
                                "UTF-8") from None
            if not line:
                return
            n += 1
            if len(line.rstrip("\n")) > max_line:
                raise DataError(f"{what} {path}, line {n}: longer than the limit of {max_line:,} characters; "
                                "a label line holds a class and a box (or one polygon)")
            yield n, line.rstrip("\n")
