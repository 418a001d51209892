"""End-of-run figures: loss, accuracy or mAP per epoch from the CSV log, and the confusion matrix.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global backend change).
"""
from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Sequence

import torch
from matplotlib.figure import Figure

from vision_attn.io.atomic import save_figure

__all__ = ["epoch_history", "plot_curves", "plot_confusion", "CLASSIFICATION_PANELS", "DETECTION_PANELS"]


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


CLASSIFICATION_PANELS = (("loss.png", ("train/loss_epoch", "val/loss"), "loss"),
                         ("accuracy.png", ("val/top1", "val/top5"), "accuracy (%)"))
DETECTION_PANELS = (("loss.png", ("train/loss_epoch", "train/box", "train/cls", "train/dfl"), "loss"),
                    ("map.png", ("val/mAP50", "val/mAP50-95"), "mAP (%)"))


def plot_curves(history: dict[str, dict[int, float]], out_dir: str | os.PathLike,
                panels: Sequence[tuple[str, Sequence[str], str]] = CLASSIFICATION_PANELS) -> list[Path]:
    """One figure per panel ``(file name, metrics, y label)`` of per-epoch values; a y label ending in
    ``(%)`` shows fractions as percentages. Default: ``loss.png`` (train and val loss) and
    ``accuracy.png`` (val top-1/top-5, %); :data:`DETECTION_PANELS`: loss parts and mAP."""
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


def plot_confusion(confusion: torch.Tensor, classes: Sequence[str], path: str | os.PathLike,
                   title: str = "validation confusion matrix") -> Path:
    """A (C, C) confusion matrix (rows: true class, columns: predicted) as a heat map with counts."""
    m = confusion.to(torch.int64)
    n = len(classes)
    side = min(max(4.0, 0.45 * n + 2), 16.0)
    fig = Figure(figsize=(side, side * 0.9))
    ax = fig.add_subplot()
    im = ax.imshow(m.numpy(), cmap="Blues")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if n <= 40:
        ax.set_xticks(range(n), list(classes), rotation=90 if n > 10 else 0)
        ax.set_yticks(range(n), list(classes))
        if n <= 20:
            peak = max(int(m.max()), 1)
            for i in range(n):
                for j in range(n):
                    if m[i, j]:
                        ax.text(j, i, str(int(m[i, j])), ha="center", va="center", fontsize=8,
                                color="white" if m[i, j] > peak / 2 else "black")
    total = int(m.sum())
    acc = float(m.diagonal().sum()) / total if total else math.nan
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(f"{title} (top-1 {100 * acc:.1f}%, {total} images)")
    return save_figure(fig, path)
