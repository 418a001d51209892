"""The folder of this user's cached files (materialised demo data sets, measured kernel choices)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$VISION_ATTN_CACHE``, else ``$XDG_CACHE_HOME/vision_attn``, else ``~/.cache/vision_attn``."""
    env = os.environ.get("VISION_ATTN_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "vision_attn"
