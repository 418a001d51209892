"""A bounded JSON reader: the file's size is checked before it is read, and nesting too deep for
Python's parser is one clear error instead of a RecursionError.

The size limit (2 GiB by default) lies above every real annotation file (COCO's instances_train2017
is 448 MB, LVIS v1 train 1.1 GB); a COCO file nests 5 levels, a metrics file 3.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from vision_attn.errors import DataError, VisionAttnError

__all__ = ["MAX_JSON_BYTES", "read_json"]

MAX_JSON_BYTES = 2 << 30


def read_json(path: str | os.PathLike, *, what: str = "JSON file", max_bytes: int = MAX_JSON_BYTES,
              error: type[VisionAttnError] = DataError) -> Any:
    """The JSON document in ``path``; ``error`` (naming the file and the limit or the position) when
    it is missing, larger than ``max_bytes``, nested past the parser's depth, or not JSON."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{what} {path}: no such file")
    size = path.stat().st_size
    if size > max_bytes:
        raise error(f"{what} {path}: {size:,} bytes is over the limit of {max_bytes:,} bytes; nothing was read")
    try:
        return json.loads(path.read_bytes())
    except RecursionError:
        raise error(f"{what} {path}: nested deeper than the JSON reader's limit (about {sys.getrecursionlimit():,} "
                    "levels; an annotation file nests about 5); this is not an annotation or metrics file") from None
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text (byte {e.start}); save the {what} as UTF-8") from None
