"""End-of-run curves of every task: its metrics per epoch from the CSV log.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global backend change).
"""
from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Sequence

from matplotlib.figure import Figure

from vision_attn.io.atomic import save_figure

__all__ = ["epoch_history", "plot_curves"]


def epoch_history(csv_path: str | os.PathLike) -> dict[str, dict[int, float]]:
    """Per-epoch values of every metric in Lightning's CSV log: ``{metric: {epoch: value}}``; a later
    row for the same epoch (a resumed run repeats the epoch it was killed in) replaces an earlier one."""
    out: dict[str, dict[int, float]] = {}
    path = Path(csv_path)
    if not path.is_file():
        return out
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            epoch = row.get("epoch")
            if not epoch:
                continue
            for key, value in row.items():
                if key in ("epoch", "step") or value in (None, ""):
                    continue
                try:
                    out.setdefault(key, {})[int(float(epoch))] = float(value)
                except ValueError:
                    continue
    return out


def plot_curves(history: dict[str, dict[int, float]], out_dir: str | os.PathLike,
                panels: Sequence[tuple[str, Sequence[str], str]]) -> list[Path]:
    """One figure per panel ``(file name, metrics, y label)`` of per-epoch values (each task's
    ``plots.py`` names its panels); a y label ending in ``(%)`` shows fractions as percentages."""
    out_dir = Path(out_dir)
    written = []
    for fname, series, ylabel in panels:
        present = [s for s in series if history.get(s)]
        if not present:
            continue
        fig = Figure(figsize=(5.5, 3.6))
        ax = fig.add_subplot()
        for s in present:
            epochs = sorted(history[s])
            values = [history[s][e] * (100 if ylabel.endswith("(%)") else 1) for e in epochs]
            ax.plot([e + 1 for e in epochs], values, marker="o", markersize=3, label=s)
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend()
        written.append(save_figure(fig, out_dir / fname))
    return written
