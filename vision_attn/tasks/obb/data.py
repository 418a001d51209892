"""The oriented-box (OBB) LightningDataModule: detection data whose boxes are turned.

Everything of :class:`~vision_attn.tasks.detect.data.DetectionDataModule` (sources, augmentation, exact
resume, the mosaic switched off at the end), with items that also carry ``target["rboxes"]`` (n, 5)
``cx, cy, w, h, r`` in network-input pixels (r in radians, ultralytics' canonical form: w the longer
side, r in [-pi/4, 3pi/4)), re-fit after every geometric augmentation
(:class:`~vision_attn.data.DetectionTransform` with ``obb=True``). Sources: ``demo:digit-obb`` or a
YOLO data YAML whose labels are oriented boxes (``class x1 y1 x2 y2 x3 y3 x4 y4``, normalised: the
DOTA layout ultralytics reads).

A batch (:func:`~vision_attn.data.collate_detection`) holds ``images`` (B, 3, S, S), per image
``boxes`` (n_i, 4) xyxy (the enclosing boxes), ``labels`` (n_i,) and ``rboxes`` (n_i, 5) in input
pixels, and ``targets``, the instances flattened as ultralytics' ``v8OBBLoss`` takes them:
``batch_idx`` (N,), ``cls`` (N, 1), ``bboxes`` (N, 5) cx, cy, w, h normalised by the input's size and
r (:func:`~vision_attn.data.detection.yolo_targets`). The validation ground truth (:meth:`ground_truth`)
carries ``rboxes`` in original pixels, what :func:`~vision_attn.evaluation.obb_map` takes.
"""
from __future__ import annotations

from typing import Any

from vision_attn.tasks.detect.data import DetectionDataModule

__all__ = ["OBBDataModule"]


class OBBDataModule(DetectionDataModule):
    """Oriented-box data for training and validation.

    Args (by keyword; :class:`~vision_attn.tasks.detect.data.DetectionDataModule`'s, whose ``data`` here
    defaults to ``demo:digit-obb``).
    """

    obb = True

    def __init__(self, *, data: str = "demo:digit-obb", **kwargs: Any) -> None:
        super().__init__(data=data, **kwargs)
