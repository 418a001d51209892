"""The rows of ``vision-attn models``: each registered variant's parameters and GMACs at its default size.

Counting a variant builds it on the meta device and runs the FLOP counter (0.05-0.3 s each, some 6 s for
every registered name), yet the counts change only with the code. So each row is counted once and
kept in the cache folder (``model_counts.json``) under a fingerprint of the code that decides it: the
source of the package and the versions of torch and timm. A listing counts only the names the cache
lacks (a new variant, or every name after the code changed); a cache that cannot be read or written is
counted past, never an error.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import vision_attn
from vision_attn.io.atomic import write_json
from vision_attn.io.cache import cache_dir, code_fingerprint

__all__ = ["model_rows", "code_fingerprint", "COUNTS_FILE"]

COUNTS_FILE = "model_counts.json"


def _count(name: str) -> dict[str, Any]:
    from vision_attn.analysis.flops import count_model_flops

    report = count_model_flops(name)  # meta device: nothing allocated, nothing computed
    return {"name": name, "params": report.params, "macs": report.macs, "gmacs": round(report.gmacs, 4),
            "img_size": list(report.input_shape[-2:])}


def _read(path: Path, fingerprint: str) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("fingerprint") != fingerprint or not isinstance(data.get("rows"), dict):
        return {}
    return data["rows"]


def model_rows(names: Sequence[str], *, cache: bool = True) -> list[dict[str, Any]]:
    """One row per name (``name``, ``params``, ``macs``, ``gmacs``, ``img_size``), from the cache where it
    holds the name for this code, else counted (and added to the cache)."""
    if not cache:
        return [_count(n) for n in names]
    fingerprint = code_fingerprint()
    path = cache_dir() / COUNTS_FILE
    rows = _read(path, fingerprint)
    missing = [n for n in names if n not in rows]
    if missing:
        rows.update({n: _count(n) for n in missing})
        try:
            write_json(path, {"fingerprint": fingerprint, "rows": rows}, mkdir=True)
        except (OSError, vision_attn.errors.VisionAttnError):  # a read-only cache: counted again next time
            pass
    return [rows[n] for n in names]
