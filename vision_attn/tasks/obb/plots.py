"""Pictures of oriented boxes: each rotated rectangle drawn as its polygon with class name (and score), and
the curves an oriented-box run draws."""
from __future__ import annotations

from typing import Sequence

import cv2
import numpy as np

from vision_attn.data.rotated import xywhr_to_corners
from vision_attn.tasks.detect.plots import PALETTE, prediction_grid

__all__ = ["OBB_PANELS", "draw_rotated", "obb_grid"]

OBB_PANELS = (("loss.png", ("train/loss_epoch", "train/box", "train/cls", "train/dfl", "train/angle"), "loss"),
              ("map.png", ("val/mAP50", "val/mAP50-95"), "mAP (%)"))
"""``loss.png`` (the loss and its parts) and ``map.png`` (rotated-box mAP@.5 and mAP@[.5:.95], %)."""


def draw_rotated(image: np.ndarray, rboxes: np.ndarray, labels: Sequence[int], names: Sequence[str],
                 scores: Sequence[float] | None = None, color: tuple[int, int, int] | None = None,
                 thickness: int = 1) -> np.ndarray:
    """A copy of ``image`` (H, W, 3) uint8 RGB with oriented boxes (N, 5) ``cx, cy, w, h, r`` (pixels,
    radians) drawn as polygons, each labelled with its class name (and score) at its highest corner; the
    colour follows the class unless ``color`` is given."""
    out = np.ascontiguousarray(image.copy())
    corners = xywhr_to_corners(np.asarray(rboxes, np.float64).reshape(-1, 5))
    scale = max(0.3, min(out.shape[:2]) / 500)
    for i, (poly, label) in enumerate(zip(corners, labels)):
        label = int(label)
        c = color or PALETTE[label % len(PALETTE)]
        cv2.polylines(out, [np.round(poly).astype(np.int32)], True, c, thickness, cv2.LINE_AA)
        text = names[label] if label < len(names) else str(label)
        if scores is not None:
            text += f" {float(scores[i]):.2f}"
        x, y = poly[np.argmin(poly[:, 1])]
        cv2.putText(out, text, (int(round(x)), max(int(round(y)) - 2, 8)), cv2.FONT_HERSHEY_SIMPLEX, scale, c, 1,
                    cv2.LINE_AA)
    return out


def obb_grid(images, predictions: Sequence[dict], truths: Sequence[dict], names: Sequence[str],
             min_score: float = 0.25) -> np.ndarray:
    """The grid of :func:`~vision_attn.tasks.detect.plots.prediction_grid` with rotated boxes: each truth's
    ``rboxes`` (white, thin) and each prediction's ``rboxes`` scoring at least ``min_score`` (class colours,
    with scores), in network-input pixels (each prediction's ``size``: the input's side)."""
    truth_boxes = iter([t["rboxes"] for t in truths])  # the tiles are drawn in order
    none = {"boxes": np.zeros((0, 4), np.float32), "scores": np.zeros(0), "labels": np.zeros(0, np.int64)}

    def underlay(tile: np.ndarray, pred: dict, kept: np.ndarray) -> np.ndarray:
        k = tile.shape[0] // max(1, int(pred.get("size", tile.shape[0])))  # the grid doubles small images
        truth = np.asarray(next(truth_boxes), np.float64).reshape(-1, 5).copy()
        truth[:, :4] *= k
        tile = draw_rotated(tile, truth, [0] * len(truth), [""], color=(255, 255, 255))
        keep = np.asarray(pred["rscores"]) >= min_score
        found = np.asarray(pred["rboxes"], np.float64).reshape(-1, 5)[keep].copy()
        found[:, :4] *= k
        return draw_rotated(tile, found, np.asarray(pred["labels_"])[keep], names, np.asarray(pred["rscores"])[keep])

    preds = [{**none, "rboxes": p["rboxes"], "rscores": p["scores"], "labels_": p["labels"], "size": p.get("size", 0)}
             for p in predictions]
    return prediction_grid(images, preds, [none] * len(truths), names, min_score, underlay=underlay)
