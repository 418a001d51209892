"""A trained oriented-box (OBB) model from a run's checkpoint: rotated-box mAP on a data set, rotated boxes
for images.

An OBB run's checkpoint has the layout of a detection run's (the -obb YAML's model dict and scale, class
names, image size, EMA weights; :mod:`vision_attn.tasks.detect.run`) with ``task: obb``; an ultralytics
``-obb.pt`` is laid out as one. Detections are the head's rotated boxes after rotated NMS (ProbIoU,
:func:`~vision_attn.models.yolo.postprocess.postprocess_rotated`; the top-k of an end-to-end head),
``cx, cy, w, h, r`` with r in [0, pi/2), taken back to the original image through the letterbox.

``runtime`` (``eval obb`` / ``predict obb --runtime``): the network exported and run in onnxruntime or
OpenVINO, which returns the same (B, 4 + nc + 1, A) rows.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np
import torch

from vision_attn.data.rotated import xywhr_to_corners
from vision_attn.data.video import FrameReader
from vision_attn.evaluation import obb_map
from vision_attn.io.ultralytics_pt import UltralyticsCheckpoint
from vision_attn.models.yolo.obb import OBB
from vision_attn.models.yolo.postprocess import is_end_to_end, postprocess_rotated, rotated_to_original
from vision_attn.tasks.detect.run import (batched, evaluation_set, inference, load_headed_run, map_listing,
                                         predict_files, predict_frames, predictor)
from vision_attn.tasks.obb.plots import draw_rotated
from vision_attn.tasks.runs import Run, Runtime, read_task_checkpoint
from vision_attn.tasks.stream import StreamResult
from vision_attn.tasks.task import Listing

__all__ = ["load_obb_run", "load_obb", "rotated_of_batch", "evaluate_obb", "predict_rotated", "predict_rotated_video",
           "eval_listing", "rotated_cell"]


def load_obb_run(ckpt: dict[str, Any] | UltralyticsCheckpoint, path, *, device: str | torch.device = "cpu",
                 weights: bool = True) -> Run:
    """The oriented-box run of the checkpoint ``ckpt`` (read from ``path``): the model rebuilt from the -obb
    YAML it records, on ``device``, with the run's weights unless ``weights`` is False."""
    return load_headed_run(ckpt, path, device=device, weights=weights, task="obb", head=OBB,
                           wrong="an OBB head: not an oriented-box run; use the `eval` / `predict` of its own task")


def load_obb(path: str | os.PathLike) -> Run:
    """The oriented-box run at ``path`` (a run folder, its ``best.ckpt``, or an ultralytics ``-obb.pt``)."""
    ckpt, file = read_task_checkpoint(path, "obb")
    return load_obb_run(ckpt, file)


def rotated_of_batch(pred: torch.Tensor, model: torch.nn.Module, batch: dict[str, Any], *, conf: float, iou: float,
                     max_det: int, multi_label: bool) -> list[dict[str, Any]]:
    """An oriented-box model's eval output (B, 4 + nc + 1, A) for a collated batch -> per image ``{image_id,
    rboxes (m, 5), scores, labels}`` in original pixels (numpy), plus ``input_rboxes`` in network-input pixels."""
    dets = postprocess_rotated(pred, conf=conf, iou=iou, max_det=max_det, multi_label=multi_label,
                               end2end=is_end_to_end(model))
    return [{"image_id": int(iid), "rboxes": rotated_to_original(d.boxes, scale=scale, pad=pad).cpu().numpy(),
             "scores": d.scores.cpu().numpy(), "labels": d.labels.cpu().numpy(), "input_rboxes": d.boxes.cpu().numpy()}
            for d, iid, scale, pad in zip(dets, batch["image_ids"], batch["scales"], batch["pads"])]


def evaluate_obb(checkpoint: str | os.PathLike, data: str | os.PathLike, *, split: str = "val", fmt: str = "auto",
                 batch_size: int = 32, num_workers: int = 0, conf: float = 0.001, iou: float = 0.7, max_det: int = 300,
                 backend: str = "faster", runtime: Runtime | None = None) -> dict[str, Any]:
    """Rotated-box mAP@[.5:.95], mAP@.5 and per-class AP (COCO's matching with the rotated IoU) of an
    oriented-box run on the ``split`` of ``data`` (``demo:digit-obb`` or a YOLO data YAML of oriented boxes);
    its classes must be the run's. ``runtime``: the network run there. (``backend``: unused; the rotated
    IoU runs in pycocotools.)"""
    run, network, dataset = evaluation_set(checkpoint, data, load_obb, split=split, fmt=fmt, runtime=runtime,
                                           obb=True)
    dets = batched(run, dataset, rotated_of_batch, batch_size=batch_size, num_workers=num_workers, conf=conf,
                   iou=iou, max_det=max_det, multi_label=True, network=network)
    report = obb_map(dataset.ground_truth(), dets, names=dataset.names, category_ids=dataset.category_ids)
    return {"checkpoint": str(checkpoint), "data": str(data), "split": split, "images": len(dataset),
            "detections": sum(len(d["scores"]) for d in dets), "map": float(report.map), "map50": float(report.map50),
            "per_class": report.as_dict()["per_class"], "table": report.table()}


def _items(d: dict[str, Any], classes: Sequence[str]) -> list[dict[str, Any]]:
    """One image's detections as JSON: ``[{"rbox": [cx, cy, w, h, r], "corners": [[x, y] x 4], "score", "label",
    "class"}]`` (pixels, r in radians)."""
    corners = xywhr_to_corners(np.asarray(d["rboxes"]).reshape(-1, 5))
    return [{"rbox": [round(float(v), 2) for v in r[:4]] + [round(float(r[4]), 5)],
             "corners": [[round(float(x), 2), round(float(y), 2)] for x, y in c], "score": round(float(s), 5),
             "label": int(lb), "class": classes[int(lb)]}
            for r, c, s, lb in zip(d["rboxes"], corners, d["scores"], d["labels"])]


def _draw(run: Run) -> Callable[[np.ndarray, dict[str, Any]], np.ndarray]:
    return lambda image, d: draw_rotated(image, d["rboxes"], d["labels"], run.classes, d["scores"], thickness=2)


def predict_rotated(checkpoint: str | os.PathLike, images: Sequence[str | os.PathLike], *,
                    output: str | os.PathLike | None = None, conf: float = 0.25, iou: float = 0.7, max_det: int = 300,
                    batch_size: int = 16, runtime: Runtime | None = None) -> list[dict[str, Any]]:
    """Oriented boxes for image files (folders are searched): ``[{"image", "width", "height", "detections":
    [{"rbox": [cx, cy, w, h, r], "corners", "score", "label", "class"}]}]`` in original pixels. With
    ``output``, each image with its rotated boxes drawn is written there under its own name, and the list as
    ``rotated.json``. ``runtime``: the network run there."""
    run, network = predictor(checkpoint, runtime, load_obb)
    infer = inference(run, network, rotated_of_batch, conf=conf, iou=iou, max_det=max_det)
    return predict_files(run, images, output, infer,
                         items=lambda d: _items(d, run.classes), draw=_draw(run), file="rotated.json", batch_size=batch_size)


def predict_rotated_video(checkpoint: str | os.PathLike, reader: FrameReader, output: str | os.PathLike, *,
                          conf: float = 0.25, iou: float = 0.7, max_det: int = 300, runtime: Runtime | None = None
                          ) -> StreamResult:
    """Oriented boxes for every frame of ``reader``: ``OUT/STEM.mp4`` drawn and ``OUT/STEM.jsonl``, one line per
    frame (``{"frame", "time", "detections"}`` as :func:`predict_rotated` gives them)."""
    run, network = predictor(checkpoint, runtime, load_obb)
    infer = inference(run, network, rotated_of_batch, conf=conf, iou=iou, max_det=max_det)
    return predict_frames(run, reader, output, infer,
                          items=lambda d: _items(d, run.classes), draw=_draw(run))


def eval_listing(report: dict[str, Any]) -> Listing:
    """The per-class rotated-box AP table of an :func:`evaluate_obb` report, and its mAP line."""
    return map_listing(report, "oriented boxes", ("rotated-box", ""))


def rotated_cell(r: dict[str, Any]) -> str:
    """One image's oriented boxes in a table cell: ``class score angle, ...`` (``-`` for none)."""
    return ", ".join(f"{d['class']} {d['score']:.2f} {np.degrees(d['rbox'][4]):.0f}deg" for d in r["detections"]) or "-"
