"""One figure per image: a row per target, a column per run, every map on the same colour scale (0 to 1)
over the image the network took, the target's box drawn."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Panel", "explain_figure"]


@dataclass(frozen=True)
class Panel:
    """``image`` (H, W, 3) uint8, its ``heat`` (H, W) in [0, 1], ``boxes`` (x1, y1, x2, y2) to draw and
    the ``caption``."""

    image: np.ndarray
    heat: np.ndarray
    boxes: Sequence[Sequence[float]]
    caption: str


def explain_figure(title: str, rows: Sequence[Sequence[Panel]], panel_inches: float = 2.6) -> Figure:
    """``rows`` of panels (one per run) under ``title``, with one colour bar for all."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    n_rows, n_cols = len(rows), max(len(r) for r in rows)
    fig = Figure(figsize=(panel_inches * n_cols + 0.8, panel_inches * n_rows + 0.5))
    axes = np.asarray(fig.subplots(n_rows, n_cols, squeeze=False))
    shown = None
    for row, row_axes in zip(rows, axes):
        for panel, ax in zip(row, row_axes):
            ax.imshow(panel.image)
            shown = ax.imshow(panel.heat, cmap="jet", alpha=0.5, vmin=0.0, vmax=1.0)
            for x1, y1, x2, y2 in panel.boxes:
                ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor="white", linewidth=1.2))
            ax.set_title(panel.caption, fontsize=8)
            ax.set_axis_off()
        for ax in row_axes[len(row):]:
            ax.set_axis_off()
    fig.suptitle(title, fontsize=9)
    fig.colorbar(shown, ax=axes.ravel().tolist(), shrink=0.8, label="map (each scaled to 0..1)")
    return fig
