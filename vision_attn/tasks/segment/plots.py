"""Pictures of instance segmentations: masks blended over images in class colours (under the boxes of
:mod:`vision_attn.tasks.detect.plots`), and the curves a segmentation run draws."""
from __future__ import annotations

from typing import Sequence

import cv2
import numpy as np

from vision_attn.tasks.detect.plots import PALETTE, draw_boxes, prediction_grid, save_image

__all__ = ["SEGMENTATION_PANELS", "draw_masks", "draw_outlines", "draw_segments", "segment_grid", "save_image"]

SEGMENTATION_PANELS = (("loss.png", ("train/loss_epoch", "train/box", "train/seg", "train/cls", "train/dfl"), "loss"),
                       ("map.png", ("val/mAP50", "val/mAP50-95", "val/mask_mAP50", "val/mask_mAP50-95"), "mAP (%)"))
"""``loss.png`` (the loss and its parts) and ``map.png`` (box and mask mAP@.5 and mAP@[.5:.95], %)."""


def draw_masks(image: np.ndarray, masks: np.ndarray, labels: Sequence[int], alpha: float = 0.45) -> np.ndarray:
    """A copy of ``image`` (H, W, 3) uint8 RGB with the binary ``masks`` (N, h, w) blended in the colour of
    their class; masks of another size than the image are resized to it (nearest)."""
    out = image.copy()
    h, w = out.shape[:2]
    for mask, label in zip(np.asarray(masks), labels):
        m = mask.astype(np.uint8)
        if m.shape != (h, w):
            m = cv2.resize(m, (w, h), interpolation=cv2.INTER_NEAREST)
        sel = m.astype(bool)
        color = np.asarray(PALETTE[int(label) % len(PALETTE)], np.float32)
        out[sel] = (out[sel] * (1 - alpha) + color * alpha).astype(np.uint8)
    return out


def draw_outlines(image: np.ndarray, masks: np.ndarray, color: tuple[int, int, int] = (255, 255, 255),
                  thickness: int = 1) -> np.ndarray:
    """A copy of ``image`` with the outline of each binary mask (N, h, w) drawn in ``color``: the ground
    truth's shapes (resized to the image, nearest)."""
    out = np.ascontiguousarray(image.copy())
    h, w = out.shape[:2]
    for mask in np.asarray(masks):
        m = mask.astype(np.uint8)
        if m.shape != (h, w):
            m = cv2.resize(m, (w, h), interpolation=cv2.INTER_NEAREST)
        contours, _ = cv2.findContours(m, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        cv2.drawContours(out, contours, -1, color, thickness)
    return out


def draw_segments(image: np.ndarray, masks: np.ndarray, boxes: np.ndarray, labels: Sequence[int],
                  names: Sequence[str], scores: Sequence[float] | None = None, thickness: int = 2) -> np.ndarray:
    """Masks blended and boxes drawn with class names (and scores): what ``predict seg -o`` writes."""
    return draw_boxes(draw_masks(image, masks, labels), boxes, labels, names, scores, thickness=thickness)


def segment_grid(images, predictions: Sequence[dict], truths: Sequence[dict], names: Sequence[str],
                 min_score: float = 0.25) -> np.ndarray:
    """:func:`~vision_attn.tasks.detect.plots.prediction_grid` with each prediction's ``masks`` (m, h, w)
    blended under its boxes, and the outlines of each truth's ``masks`` (white) where it has them."""
    truth_masks = iter([t.get("masks") for t in truths])  # the tiles are drawn in order

    def underlay(tile: np.ndarray, pred: dict, kept: np.ndarray) -> np.ndarray:
        masks, truth = pred.get("masks"), next(truth_masks, None)
        if masks is not None and len(masks):
            tile = draw_masks(tile, np.asarray(masks)[kept], np.asarray(pred["labels"])[kept])
        if truth is not None and len(truth):
            tile = draw_outlines(tile, truth)
        return tile

    return prediction_grid(images, predictions, truths, names, min_score, underlay=underlay)
