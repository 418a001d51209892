"""The classification run's figures: the curves it draws and the validation confusion matrix."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import cv2
import numpy as np
import torch
from matplotlib.figure import Figure

from vision_attn.io.atomic import save_figure

__all__ = ["CLASSIFICATION_PANELS", "plot_confusion"]

CLASSIFICATION_PANELS = (("loss.png", ("train/loss_epoch", "val/loss"), "loss"),
                         ("accuracy.png", ("val/top1", "val/top5"), "accuracy (%)"))
"""``loss.png`` (train and val loss) and ``accuracy.png`` (val top-1/top-5, %)."""


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


def draw_caption(image: np.ndarray, lines: Sequence[str]) -> np.ndarray:
    """A copy of ``image`` (H, W, 3) uint8 RGB with ``lines`` of text at its top left, white on black."""
    out = np.ascontiguousarray(image.copy())
    scale = max(0.35, min(out.shape[:2]) / 900)
    thickness = max(1, round(scale * 2))
    y = 0
    for text in lines:
        (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thickness)
        cv2.rectangle(out, (0, y), (w + 6, y + h + base + 6), (0, 0, 0), -1)
        cv2.putText(out, text, (3, y + h + 3), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), thickness, cv2.LINE_AA)
        y += h + base + 6
    return out
