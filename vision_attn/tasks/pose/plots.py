"""Pictures of keypoints: each instance's points (and the set's skeleton) drawn over its box in the class
colour, and the curves a keypoint run draws."""
from __future__ import annotations

from typing import Sequence

import cv2
import numpy as np

from vision_attn.tasks.detect.plots import PALETTE, draw_boxes, prediction_grid

__all__ = ["POSE_PANELS", "draw_keypoints", "draw_poses", "pose_grid"]

POSE_PANELS = (("loss.png", ("train/loss_epoch", "train/box", "train/pose", "train/kobj", "train/cls", "train/dfl"),
                "loss"),
               ("map.png", ("val/mAP50", "val/mAP50-95", "val/pose_mAP50", "val/pose_mAP50-95"), "mAP (%)"))
"""``loss.png`` (the loss and its parts) and ``map.png`` (box and keypoint mAP@.5 and mAP@[.5:.95], %)."""


def draw_keypoints(image: np.ndarray, keypoints: np.ndarray, labels: Sequence[int],
                   skeleton: Sequence[Sequence[int]] = (), min_conf: float = 0.5,
                   color: tuple[int, int, int] | None = None) -> np.ndarray:
    """A copy of ``image`` (H, W, 3) uint8 RGB with each instance's keypoints (n, K, 2 or 3) drawn as dots
    and the ``skeleton`` pairs (0-based) as lines, in the colour of its class (or ``color``); a point whose
    third value (visibility or confidence) is under ``min_conf`` is left out (0 for labels: not labelled)."""
    out = np.ascontiguousarray(image.copy())
    pts = np.asarray(keypoints, np.float32)
    radius = max(1, round(min(out.shape[:2]) / 160))
    for inst, label in zip(pts.reshape(len(pts), -1, pts.shape[-1]) if pts.size else [], labels):
        c = color or PALETTE[int(label) % len(PALETTE)]
        shown = inst[:, 2] >= min_conf if inst.shape[-1] > 2 else np.ones(len(inst), bool)
        for a, b in skeleton:
            if a < len(inst) and b < len(inst) and shown[a] and shown[b]:
                cv2.line(out, tuple(int(round(v)) for v in inst[a, :2]), tuple(int(round(v)) for v in inst[b, :2]),
                         c, 1, cv2.LINE_AA)
        for p, ok in zip(inst, shown):
            if ok:
                cv2.circle(out, (int(round(p[0])), int(round(p[1]))), radius, c, -1, cv2.LINE_AA)
    return out


def draw_poses(image: np.ndarray, boxes: np.ndarray, keypoints: np.ndarray, labels: Sequence[int],
               names: Sequence[str], scores: Sequence[float] | None = None, skeleton: Sequence[Sequence[int]] = (),
               thickness: int = 2) -> np.ndarray:
    """Boxes with class names (and scores) and each box's keypoints with the skeleton: what ``predict pose -o``
    writes."""
    return draw_boxes(draw_keypoints(image, keypoints, labels, skeleton), boxes, labels, names, scores,
                      thickness=thickness)


def pose_grid(images, predictions: Sequence[dict], truths: Sequence[dict], names: Sequence[str],
              min_score: float = 0.25, skeleton: Sequence[Sequence[int]] = ()) -> np.ndarray:
    """:func:`~vision_attn.tasks.detect.plots.prediction_grid` with each prediction's ``keypoints`` (m, K, D)
    drawn under its boxes, and each truth's ``keypoints`` (white) where it has them (network-input pixels; each
    prediction's ``size``: the input's side)."""
    truth_points = iter([t.get("keypoints") for t in truths])  # the tiles are drawn in order

    def underlay(tile: np.ndarray, pred: dict, kept: np.ndarray) -> np.ndarray:
        k = tile.shape[0] // max(1, int(pred.get("size", tile.shape[0])))  # the grid doubles small images
        truth = next(truth_points, None)
        if truth is not None and len(truth):
            pts = np.asarray(truth, np.float32).copy()
            pts[..., :2] *= k
            tile = draw_keypoints(tile, pts, [0] * len(pts), skeleton, min_conf=0.5, color=(255, 255, 255))
        points = pred.get("keypoints")
        if points is not None and len(points):
            pts = np.asarray(points, np.float32)[kept].copy()
            pts[..., :2] *= k
            tile = draw_keypoints(tile, pts, np.asarray(pred["labels"])[kept], skeleton)
        return tile

    return prediction_grid(images, predictions, truths, names, min_score, underlay=underlay)
