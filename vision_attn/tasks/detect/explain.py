"""What ``vision-attn explain`` asks of a detection (and segmentation) run: the letterboxed image the
network takes, and one target per detected box: its class probability at the anchor the detection
came from (NMS picks anchors; the anchor's score is differentiable, the kept list is not), read at the
head level that anchor is a cell of."""
from __future__ import annotations

import bisect
import itertools
import math
from typing import Sequence

import numpy as np
import torch
from torchvision.ops import box_convert, box_iou

from vision_attn.data.det_transforms import DetectionTransform
from vision_attn.models.yolo.postprocess import is_end_to_end, postprocess
from vision_attn.tasks.detect.run import FrameList
from vision_attn.tasks.runs import Run
from vision_attn.tasks.task import Explain, ExplainTarget

__all__ = ["DETECT_EXPLAIN"]

CONF, IOU = 0.25, 0.7


def _to_input(run: Run, image: np.ndarray) -> torch.Tensor:
    """The image letterboxed to the run's square size, as prediction gives it to the network."""
    x, _ = DetectionTransform(run.img_size[0])(FrameList([image]), 0)
    return x.unsqueeze(0)


def _levels(run: Run, anchors: int) -> list[int] | None:
    """The anchor count of each head level, finest first, when the ``anchors`` of the run's square input
    are the head's cells level after level (an anchor-per-cell head: Detect, Segment), else None."""
    side = run.img_size[0]
    counts = [math.ceil(side / s) ** 2 for s in getattr(run.model, "stride", [])]
    return counts if counts and sum(counts) == anchors else None


def _anchor_target(anchor: int, cls: int, box: Sequence[float], label: str,
                   levels: list[int] | None) -> ExplainTarget:
    """The class-``cls`` probability of ``anchor`` in one image's (4 + nc [+ nm], A) output, on the head
    level the anchor is a cell of."""
    level = None if levels is None else bisect.bisect_right(list(itertools.accumulate(levels)), anchor)
    return ExplainTarget(label, cls, lambda pred: pred[4 + cls, anchor], tuple(float(v) for v in box), level)


def _targets(run: Run, pred: torch.Tensor, k: int) -> list[ExplainTarget]:
    """The ``k`` best detections (``conf`` 0.25, NMS IoU 0.7, as ``predict``) of a decoded output (1, 4 + nc
    + nm, A) (``nm`` mask coefficients of a segmenter's instances); the anchor each came from rides through
    NMS as one more coefficient channel."""
    m = pred.shape[1] - 4 - len(run.classes)
    anchors = torch.arange(pred.shape[-1], dtype=pred.dtype).view(1, 1, -1)
    found = postprocess(torch.cat([pred.detach(), anchors.expand(pred.shape[0], 1, -1)], 1), conf=CONF, iou=IOU,
                        max_det=k, end2end=is_end_to_end(run.model), nm=m + 1)[0]
    levels = _levels(run, pred.shape[-1])
    return [_anchor_target(int(c[-1]), int(lb), b.tolist(), f"{run.classes[int(lb)]} {float(s):.2f}", levels)
            for b, s, lb, c in zip(found.boxes, found.scores, found.labels, found.coeffs)]


def _align(run: Run, target: ExplainTarget, pred: torch.Tensor) -> ExplainTarget:
    """The same class and box on another run: the anchor whose box overlaps ``target.box`` most, weighted
    by its probability of the class."""
    p = pred.detach().float()[0]
    boxes = box_convert(p[:4].T, "cxcywh", "xyxy")
    overlap = box_iou(torch.tensor([target.box]), boxes)[0] * p[4 + target.index]
    anchor = int(overlap.argmax())
    caption = f"{target.label.rsplit(' ', 1)[0]} {float(p[4 + target.index, anchor]):.2f}"
    return _anchor_target(anchor, target.index, target.box, caption, _levels(run, pred.shape[-1]))


DETECT_EXPLAIN = Explain(methods=("gradcam", "gradcam++", "eigencam", "layercam"), to_input=_to_input,
                         output=lambda raw: raw if torch.is_tensor(raw) else raw[0], targets=_targets, align=_align,
                         default="layercam")
"""Detectors' and segmenters' (whose instances are detections with mask coefficients). LayerCAM by
default: one anchor's score has gradients only in that anchor's receptive field, and LayerCAM weighs
each cell by its own gradient, so the map stays on the detection; Grad-CAM averages the gradients into
one weight per channel and paints that channel mix wherever it occurs (every digit alike)."""
