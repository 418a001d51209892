"""The folder of this user's cached files (materialised demo data sets, measured kernel choices, counts and
keys kept for one version of the code: :func:`code_fingerprint`)."""
from __future__ import annotations

import hashlib
import os
from importlib import metadata
from pathlib import Path
from typing import Sequence


def cache_dir() -> Path:
    """``$VISION_ATTN_CACHE``, else ``$XDG_CACHE_HOME/vision_attn``, else ``~/.cache/vision_attn``."""
    env = os.environ.get("VISION_ATTN_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "vision_attn"


def code_fingerprint(distributions: Sequence[str] = ("torch", "timm")) -> str:
    """A hash of every ``.py`` file of the package (names and contents: its version among them) and the
    versions of ``distributions``: the key of results cached for this code (a few ms; imports nothing)."""
    root = Path(__file__).resolve().parent.parent  # vision_attn/
    digest = hashlib.sha256()
    for dist in distributions:
        try:
            digest.update(f"{dist}={metadata.version(dist)};".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{dist}=none;".encode())
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
