"""Pictures of detections: boxes with class names and scores drawn on images (OpenCV), and the grid
of validation samples a detection run saves after each validation."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable, Sequence

import cv2
import numpy as np
import torch

from vision_attn.io.atomic import write_bytes

DETECTION_PANELS = (("loss.png", ("train/loss_epoch", "train/box", "train/cls", "train/dfl"), "loss"),
                    ("map.png", ("val/mAP50", "val/mAP50-95"), "mAP (%)"))
"""``loss.png`` (the loss and its parts) and ``map.png`` (mAP@.5 and mAP@[.5:.95], %)."""

__all__ = ["DETECTION_PANELS", "PALETTE", "draw_boxes", "prediction_grid", "save_image"]

PALETTE = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180),
            (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128), (220, 190, 255)]


def draw_boxes(image: np.ndarray, boxes: np.ndarray | torch.Tensor, labels: Sequence[int], names: Sequence[str],
               scores: Sequence[float] | None = None, color: tuple[int, int, int] | None = None,
               thickness: int = 1) -> np.ndarray:
    """A copy of ``image`` (H, W, 3) uint8 RGB with boxes (N, 4) xyxy drawn, each labelled with its class
    name (and score); the colour follows the class unless ``color`` is given."""
    out = np.ascontiguousarray(image.copy())
    boxes = np.asarray(boxes.cpu() if isinstance(boxes, torch.Tensor) else boxes, dtype=np.float32).reshape(-1, 4)
    scale = max(0.3, min(out.shape[:2]) / 500)
    for i, (box, label) in enumerate(zip(boxes, labels)):
        label = int(label)
        c = color or PALETTE[label % len(PALETTE)]
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        cv2.rectangle(out, (x1, y1), (x2, y2), c, thickness, cv2.LINE_AA)
        text = names[label] if label < len(names) else str(label)
        if scores is not None:
            text += f" {float(scores[i]):.2f}"
        cv2.putText(out, text, (x1, max(y1 - 2, 8)), cv2.FONT_HERSHEY_SIMPLEX, scale, c, 1, cv2.LINE_AA)
    return out


def prediction_grid(images: torch.Tensor, predictions: Sequence[dict], truths: Sequence[dict],
                    names: Sequence[str], min_score: float = 0.25,
                    underlay: Callable[[np.ndarray, dict, np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Images (B, 3, H, W) in [0, 1] with ground truth (white, thin) and predictions scoring at least
    ``min_score`` (class colours, with scores) in a grid of up to 4 columns -> (H', W', 3) uint8 RGB.
    ``predictions[i]``: ``boxes``, ``scores``, ``labels``; ``truths[i]``: ``boxes``, ``labels``
    (network-input pixels). ``underlay(tile, prediction, kept)``: drawn on each tile before the boxes
    (``kept``: which predictions are shown), e.g. instance masks."""
    tiles = []
    for img, pred, truth in zip(images, predictions, truths):
        tile = (img.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).astype(np.uint8)
        tile = cv2.resize(tile, None, fx=2, fy=2, interpolation=cv2.INTER_NEAREST) if max(tile.shape[:2]) < 320 else tile
        k = 2 if tile.shape[0] != img.shape[-2] else 1
        if underlay is not None:
            tile = underlay(tile, pred, np.asarray(pred["scores"]) >= min_score)
        tile = draw_boxes(tile, np.asarray(truth["boxes"], dtype=np.float32) * k, truth["labels"], names,
                          color=(255, 255, 255))
        keep = np.asarray(pred["scores"]) >= min_score
        tile = draw_boxes(tile, np.asarray(pred["boxes"], dtype=np.float32)[keep] * k,
                          np.asarray(pred["labels"])[keep], names, np.asarray(pred["scores"])[keep])
        tiles.append(tile)
    if not tiles:
        return np.zeros((8, 8, 3), np.uint8)
    cols = min(4, len(tiles))
    rows = math.ceil(len(tiles) / cols)
    h, w = tiles[0].shape[:2]
    grid = np.full((rows * (h + 4), cols * (w + 4), 3), 255, np.uint8)
    for i, tile in enumerate(tiles):
        r, c = divmod(i, cols)
        grid[r * (h + 4):r * (h + 4) + h, c * (w + 4):c * (w + 4) + w] = tile
    return grid


def save_image(image: np.ndarray, path: str | os.PathLike) -> Path:
    """Write an (H, W, 3) uint8 RGB image (PNG, JPEG by extension) atomically."""
    path = Path(path)
    ok, data = cv2.imencode(path.suffix or ".png", cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    if not ok:
        raise ValueError(f"cannot encode an image as {path.suffix}")
    return write_bytes(path, data.tobytes(), mkdir=True)
