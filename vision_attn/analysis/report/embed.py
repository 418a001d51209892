"""Figures and image files as ``data:`` URIs, downscaled so that a page of many runs stays small."""
from __future__ import annotations

import base64
import io
import os
from typing import TYPE_CHECKING

from PIL import Image

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["figure_uri", "image_uri", "MAX_SIDE"]

MAX_SIDE = 720
"""The longest side, in pixels, of any embedded picture."""


def _png(image: Image.Image, max_side: int) -> str:
    image = image.convert("RGB") if image.mode not in ("RGB", "L") else image
    image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def figure_uri(fig: Figure, max_side: int = MAX_SIDE, dpi: int = 80) -> str:
    """A matplotlib figure rendered with Agg, as a PNG ``data:`` URI at most ``max_side`` pixels long."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    buf = io.BytesIO()
    FigureCanvasAgg(fig)
    fig.savefig(buf, format="png", dpi=dpi)
    buf.seek(0)
    with Image.open(buf) as im:
        return _png(im, max_side)


def image_uri(path: str | os.PathLike, max_side: int = 400, quality: int = 80) -> str:
    """An image file (a run's figure) as a JPEG ``data:`` URI at most ``max_side`` pixels long (a run's
    pictures are many: JPEG keeps twenty runs' under a megabyte or two)."""
    with Image.open(path) as im:
        image = im.convert("RGB")
    image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=quality, optimize=True)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
