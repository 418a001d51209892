"""A trained keypoint (pose) model from a run's checkpoint: box and keypoint evaluation on a data set,
boxes with keypoints for images.

A pose run's checkpoint has the layout of a detection run's (the -pose YAML's model dict with the data's
``kpt_shape``, its scale, class names, image size, EMA weights; :mod:`vision_attn.tasks.detect.run`) with
``task: pose`` and the data's keypoints (``kpt_shape``, ``flip_idx``, OKS sigmas, point names, skeleton)
among its hyper-parameters; an ultralytics ``-pose.pt`` is laid out as one. Each detection's keypoints
are the head's decoded points (x, y in input pixels, and a visibility probability when the points have
three numbers), taken back to the original image through the letterbox.

``runtime`` (``eval pose`` / ``predict pose --runtime``): the network exported and run in onnxruntime or
OpenVINO, which returns the same (B, 4 + nc + K * D, A) rows; detections are then made here as for
PyTorch's output.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Sequence

import numpy as np
import torch

from vision_attn.data.video import FrameReader
from vision_attn.errors import DataError
from vision_attn.evaluation import coco_map, keypoint_map
from vision_attn.io.ultralytics_pt import UltralyticsCheckpoint
from vision_attn.models.yolo.pose import Pose
from vision_attn.models.yolo.postprocess import is_end_to_end, keypoints_to_original, postprocess, to_original
from vision_attn.tasks.detect.run import (batched, evaluation_set, inference, load_headed_run, map_listing,
                                         predict_files, predict_frames, predictor)
from vision_attn.tasks.pose.plots import draw_poses
from vision_attn.tasks.runs import Run, Runtime, read_task_checkpoint
from vision_attn.tasks.stream import StreamResult
from vision_attn.tasks.task import Listing

__all__ = ["load_pose_run", "load_pose", "keypoints_of_batch", "evaluate_pose", "predict_keypoints",
           "predict_keypoint_video", "eval_listing", "keypoints_cell"]


def load_pose_run(ckpt: dict[str, Any] | UltralyticsCheckpoint, path, *, device: str | torch.device = "cpu",
                  weights: bool = True) -> Run:
    """The keypoint run of the checkpoint ``ckpt`` (read from ``path``): the model rebuilt from the -pose YAML
    it records, on ``device``, with the run's weights unless ``weights`` is False; ``extra["keypoints"]``:
    the data's keypoints as the run recorded them (an ultralytics file: its ``kpt_shape`` only)."""
    run = load_headed_run(ckpt, path, device=device, weights=weights, task="pose", head=Pose,
                          wrong="a Pose head: not a keypoint run; use the `eval` / `predict` of its own task")
    spec = dict(run.hparams.get("keypoints") or {})
    spec.setdefault("kpt_shape", list(run.model.model[-1].kpt_shape))
    spec.setdefault("skeleton", [])
    return dataclasses.replace(run, extra={**run.extra, "keypoints": spec})


def load_pose(path: str | os.PathLike) -> Run:
    """The keypoint run at ``path`` (a run folder, its ``best.ckpt``, or an ultralytics ``-pose.pt``)."""
    ckpt, file = read_task_checkpoint(path, "pose")
    return load_pose_run(ckpt, file)


def keypoints_of_batch(pred: torch.Tensor, model: torch.nn.Module, batch: dict[str, Any], *, conf: float,
                       iou: float, max_det: int, multi_label: bool) -> list[dict[str, Any]]:
    """A keypoint model's eval output (B, 4 + nc + K * D, A) for a collated batch -> per image ``{image_id,
    boxes, scores, labels, keypoints (m, K, D)}`` in original pixels (numpy), plus ``input_boxes`` and
    ``input_keypoints`` in network-input pixels."""
    head = model.model[-1]
    k, d = head.kpt_shape
    dets = postprocess(pred, conf=conf, iou=iou, max_det=max_det, multi_label=multi_label,
                       end2end=is_end_to_end(model), nm=head.nk)
    out = []
    for det, iid, orig, scale, pad in zip(dets, batch["image_ids"], batch["orig_sizes"], batch["scales"],
                                          batch["pads"]):
        points = det.coeffs.reshape(-1, k, d)
        out.append({"image_id": int(iid),
                    "boxes": to_original(det.boxes, scale=scale, pad=pad, orig_size=orig).cpu().numpy(),
                    "scores": det.scores.cpu().numpy(), "labels": det.labels.cpu().numpy(),
                    "keypoints": keypoints_to_original(points, scale=scale, pad=pad, orig_size=orig).cpu().numpy(),
                    "input_boxes": det.boxes.cpu().numpy(), "input_keypoints": points.cpu().numpy()})
    return out


def evaluate_pose(checkpoint: str | os.PathLike, data: str | os.PathLike, *, split: str = "val", fmt: str = "auto",
                  batch_size: int = 32, num_workers: int = 0, conf: float = 0.001, iou: float = 0.7,
                  max_det: int = 300, backend: str = "faster", runtime: Runtime | None = None) -> dict[str, Any]:
    """Box COCO mAP and keypoint (OKS, the data's sigmas) mAP@[.5:.95], mAP@.5 and per-class AP of a keypoint
    run on the ``split`` of ``data`` (``demo:digit-keypoints``, a YOLO data YAML with ``kpt_shape``, a COCO
    keypoints folder); its classes and ``kpt_shape`` must be the run's. ``runtime``: the network run there."""
    run, network, dataset = evaluation_set(checkpoint, data, load_pose, split=split, fmt=fmt, runtime=runtime,
                                           keypoints=True)
    spec = dataset.keypoint_spec
    if list(spec.kpt_shape) != list(run.model.model[-1].kpt_shape):
        raise DataError(f"{data} ({split}) has kpt_shape {spec.kpt_shape} but the checkpoint predicts "
                        f"{list(run.model.model[-1].kpt_shape)}; evaluate on data with the run's keypoints")
    dets = batched(run, dataset, keypoints_of_batch, batch_size=batch_size, num_workers=num_workers, conf=conf,
                   iou=iou, max_det=max_det, multi_label=True, network=network)
    truth = dataset.ground_truth()
    box = coco_map(truth, dets, names=dataset.names, category_ids=dataset.category_ids, backend=backend)
    pose = keypoint_map(truth, dets, names=dataset.names, category_ids=dataset.category_ids, sigmas=spec.sigmas)
    return {"checkpoint": str(checkpoint), "data": str(data), "split": split, "images": len(dataset),
            "detections": sum(len(d["scores"]) for d in dets), "map": float(box.map), "map50": float(box.map50),
            "pose_map": float(pose.map), "pose_map50": float(pose.map50), "per_class": box.as_dict()["per_class"],
            "per_class_pose": pose.as_dict()["per_class"], "table": box.table(), "pose_table": pose.table()}


def _items(d: dict[str, Any], classes: Sequence[str]) -> list[dict[str, Any]]:
    """One image's detections as JSON: ``[{"box": [x1, y1, x2, y2], "score", "label", "class", "keypoints":
    [[x, y(, visibility)], ...]}]``."""
    return [{"box": [round(float(v), 2) for v in box], "score": round(float(s), 5), "label": int(lb),
             "class": classes[int(lb)], "keypoints": [[round(float(v), 2 if i < 2 else 4) for i, v in enumerate(p)]
                                                       for p in pts]}
            for box, s, lb, pts in zip(d["boxes"], d["scores"], d["labels"], d["keypoints"])]


def _draw(run: Run) -> Callable[[np.ndarray, dict[str, Any]], np.ndarray]:
    skeleton = run.extra["keypoints"].get("skeleton") or []
    return lambda image, d: draw_poses(image, d["boxes"], d["keypoints"], d["labels"], run.classes, d["scores"],
                                       skeleton=skeleton)


def predict_keypoints(checkpoint: str | os.PathLike, images: Sequence[str | os.PathLike], *,
                      output: str | os.PathLike | None = None, conf: float = 0.25, iou: float = 0.7,
                      max_det: int = 300, batch_size: int = 16, runtime: Runtime | None = None) -> list[dict[str, Any]]:
    """Boxes with keypoints for image files (folders are searched): ``[{"image", "width", "height",
    "detections": [{"box", "score", "label", "class", "keypoints": [[x, y(, visibility)], ...]}]}]`` in
    original pixels. With ``output``, each image with its boxes, points and skeleton drawn is written there
    under its own name, and the list as ``keypoints.json``. ``runtime``: the network run there."""
    run, network = predictor(checkpoint, runtime, load_pose)
    infer = inference(run, network, keypoints_of_batch, conf=conf, iou=iou, max_det=max_det)
    return predict_files(run, images, output, infer,
                         items=lambda d: _items(d, run.classes), draw=_draw(run), file="keypoints.json", batch_size=batch_size)


def predict_keypoint_video(checkpoint: str | os.PathLike, reader: FrameReader, output: str | os.PathLike, *,
                           conf: float = 0.25, iou: float = 0.7, max_det: int = 300, runtime: Runtime | None = None
                           ) -> StreamResult:
    """Boxes with keypoints for every frame of ``reader``: ``OUT/STEM.mp4`` drawn and ``OUT/STEM.jsonl``, one
    line per frame (``{"frame", "time", "detections"}`` as :func:`predict_keypoints` gives them)."""
    run, network = predictor(checkpoint, runtime, load_pose)
    infer = inference(run, network, keypoints_of_batch, conf=conf, iou=iou, max_det=max_det)
    return predict_frames(run, reader, output, infer,
                          items=lambda d: _items(d, run.classes), draw=_draw(run))


def eval_listing(report: dict[str, Any]) -> Listing:
    """The per-class box and keypoint AP table of an :func:`evaluate_pose` report, and its mAP line."""
    return map_listing(report, "instances", ("box", ""), ("keypoint", "pose"))


def keypoints_cell(r: dict[str, Any]) -> str:
    """One image's detections in a table cell: ``class score (K points), ...`` (``-`` for none)."""
    return ", ".join(f"{d['class']} {d['score']:.2f} ({len(d['keypoints'])} points)" for d in r["detections"]) or "-"
