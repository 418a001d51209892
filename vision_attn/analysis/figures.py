"""Saving matplotlib figures atomically (temporary file in the same folder, then rename)."""
from __future__ import annotations

import os
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vision_attn.errors import ConfigError

__all__ = ["save_figure"]


def save_figure(fig: Figure, path: str | os.PathLike, dpi: int = 110) -> Path:
    """Render ``fig`` with Agg to ``path`` (PNG) atomically; the folder must exist."""
    path = Path(path)
    if not path.parent.is_dir():
        raise ConfigError(f"{path}: the folder {path.parent} does not exist; nothing was written")
    FigureCanvasAgg(fig)
    tmp = path.with_name(f".{path.name}.tmp.png")
    try:
        fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format="png")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path
