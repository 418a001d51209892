"""A trained instance-segmentation model from a run's checkpoint: box and mask COCO evaluation on a
data set, masks for images.

A segmentation run's checkpoint has the layout of a detection run's (the -seg YAML's model dict and
scale, class names, image size, EMA weights; :mod:`vision_attn.tasks.detect.run`) with ``task: seg``;
an ultralytics ``-seg.pt`` is laid out as one. Masks are the sigmoid of each detection's coefficients
times the prototypes, cropped to its box and upsampled to the input (:mod:`vision_attn.models.yolo.masks`),
then taken back to the original image (letterbox undone) and thresholded at 0.5.

``runtime`` (``eval seg`` / ``predict seg --runtime``): the network exported and run in onnxruntime or
OpenVINO (:class:`~vision_attn.export.runtimes.RuntimeModel`, through the command's factory), which returns
the same ``(pred, protos)`` pair; masks and boxes are then made here as for PyTorch's output.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from vision_attn.data.masks import encode_mask
from vision_attn.evaluation import coco_map
from vision_attn.io.ultralytics_pt import UltralyticsCheckpoint
from vision_attn.models.yolo.masks import instance_masks, masks_to_original
from vision_attn.models.yolo.postprocess import is_end_to_end, postprocess, to_original
from vision_attn.models.yolo.segment import Segment
from vision_attn.data.video import FrameReader
from vision_attn.tasks.detect.run import (batched, evaluation_set, inference, load_headed_run, map_listing,
                                         predict_files, predict_frames, predictor)
from vision_attn.tasks.runs import Run, Runtime, read_task_checkpoint
from vision_attn.tasks.segment.plots import draw_segments
from vision_attn.tasks.stream import StreamResult
from vision_attn.tasks.task import Listing

__all__ = ["load_segmenter_run", "load_segmenter", "segments_of_batch", "evaluate_segmenter", "predict_segments",
           "predict_segment_video"]


def load_segmenter_run(ckpt: dict[str, Any] | UltralyticsCheckpoint, path: Path, *,
                       device: str | torch.device = "cpu", weights: bool = True) -> Run:
    """The segmentation run of the checkpoint ``ckpt`` (read from ``path``): the model rebuilt from the
    -seg YAML it records, on ``device``, with the run's weights unless ``weights`` is False."""
    return load_headed_run(ckpt, path, device=device, weights=weights, task="seg", head=Segment,
                           wrong="a Segment head: a detection run; use `vision-attn eval det` / `predict det`")


def load_segmenter(path: str | os.PathLike) -> Run:
    """The segmentation run at ``path`` (a run folder, its ``best.ckpt``, or an ultralytics ``-seg.pt``)."""
    ckpt, file = read_task_checkpoint(path, "seg")
    return load_segmenter_run(ckpt, file)


def segments_of_batch(out: tuple[torch.Tensor, torch.Tensor], model: torch.nn.Module, batch: dict[str, Any], *,
                      conf: float, iou: float, max_det: int, multi_label: bool) -> list[dict[str, Any]]:
    """A segmentation model's eval output ``(pred, protos)`` for a collated batch -> per image
    ``{image_id, boxes, scores, labels, masks}`` in original pixels (numpy; ``masks`` (m, h, w) uint8 0/1),
    plus ``input_boxes`` and ``input_masks`` ((m, H, W) uint8) in network-input pixels."""
    pred, protos = out
    head = model.model[-1]
    dets = postprocess(pred, conf=conf, iou=iou, max_det=max_det, multi_label=multi_label,
                       end2end=is_end_to_end(model), nm=head.nm)
    size = tuple(batch["images"].shape[-2:])
    results = []
    for det, p, iid, orig, scale, pad in zip(dets, protos, batch["image_ids"], batch["orig_sizes"], batch["scales"],
                                             batch["pads"]):
        masks = instance_masks(p, det.coeffs, det.boxes, size)  # (m, H, W) uint8, input pixels
        results.append({"image_id": int(iid),
                        "boxes": to_original(det.boxes, scale=scale, pad=pad, orig_size=orig).cpu().numpy(),
                        "scores": det.scores.cpu().numpy(), "labels": det.labels.cpu().numpy(),
                        "masks": masks_to_original(masks, scale=scale, pad=pad, orig_size=orig).cpu().numpy(),
                        "input_boxes": det.boxes.cpu().numpy(), "input_masks": masks.cpu().numpy()})
    return results


def with_rle(d: dict[str, Any]) -> dict[str, Any]:
    """One image's segments with its masks as COCO RLEs (what ``coco_map(iou_type="segm")`` takes) and
    without the network-input copies."""
    out = {k: v for k, v in d.items() if not k.startswith("input_")}
    out["masks"] = [encode_mask(m.astype(np.uint8)) for m in d["masks"]]
    return out


def evaluate_segmenter(checkpoint: str | os.PathLike, data: str | os.PathLike, *, split: str = "val",
                       fmt: str = "auto", batch_size: int = 32, num_workers: int = 0, conf: float = 0.001,
                       iou: float = 0.7, max_det: int = 300, backend: str = "faster", runtime: Runtime | None = None
                       ) -> dict[str, Any]:
    """Box and mask COCO mAP@[.5:.95], mAP@.5 and per-class AP of a segmentation run on the ``split`` of
    ``data`` (``demo:digit-masks``, a YOLO data YAML with polygon labels, a COCO folder with segmentations).
    ``runtime``: the network run there (calibrated, where it calibrates, on 128 of ``data``'s training
    images)."""
    seg, network, dataset = evaluation_set(checkpoint, data, load_segmenter, split=split, fmt=fmt, runtime=runtime,
                                           masks=True)
    dets = [with_rle(d) for d in batched(seg, dataset, segments_of_batch, batch_size=batch_size,
                                         num_workers=num_workers, conf=conf, iou=iou, max_det=max_det,
                                         multi_label=True, network=network)]
    truth = dataset.ground_truth()
    box = coco_map(truth, dets, names=dataset.names, category_ids=dataset.category_ids, backend=backend)
    mask = coco_map(truth, dets, names=dataset.names, category_ids=dataset.category_ids, backend=backend,
                    iou_type="segm")
    return {"checkpoint": str(checkpoint), "data": str(data), "split": split, "images": len(dataset),
            "detections": sum(len(d["scores"]) for d in dets), "map": float(box.map), "map50": float(box.map50),
            "mask_map": float(mask.map), "mask_map50": float(mask.map50), "per_class": box.as_dict()["per_class"],
            "per_class_mask": mask.as_dict()["per_class"], "table": box.table(), "mask_table": mask.table()}


def _json_mask(mask: np.ndarray) -> dict[str, Any]:
    rle = encode_mask(mask.astype(np.uint8))
    counts = rle["counts"]
    return {"size": list(rle["size"]), "counts": counts.decode("ascii") if isinstance(counts, bytes) else counts}


def _items(d: dict[str, Any], classes: Sequence[str]) -> list[dict[str, Any]]:
    """One image's segments as JSON: ``[{"box": [x1, y1, x2, y2], "score", "label", "class", "mask"}]``."""
    return [{"box": [round(float(v), 2) for v in box], "score": round(float(s), 5), "label": int(lb),
             "class": classes[int(lb)], "mask": _json_mask(m)}
            for box, s, lb, m in zip(d["boxes"], d["scores"], d["labels"], d["masks"])]


def _draw(run: Run) -> Callable[[np.ndarray, dict[str, Any]], np.ndarray]:
    return lambda image, d: draw_segments(image, d["masks"], d["boxes"], d["labels"], run.classes, d["scores"])


def predict_segments(checkpoint: str | os.PathLike, images: Sequence[str | os.PathLike], *,
                     output: str | os.PathLike | None = None, conf: float = 0.25, iou: float = 0.7,
                     max_det: int = 300, batch_size: int = 16, runtime: Runtime | None = None
                     ) -> list[dict[str, Any]]:
    """Instance masks for image files (folders are searched): ``[{"image", "width", "height",
    "detections": [{"box", "score", "label", "class", "mask": COCO RLE {"size": [h, w], "counts"}}]}]``
    in original pixels. With ``output``, each image with its masks and boxes drawn is written there under
    its own name, and the list as ``segments.json``. ``runtime``: the network run there."""
    seg, network = predictor(checkpoint, runtime, load_segmenter)
    infer = inference(seg, network, segments_of_batch, conf=conf, iou=iou, max_det=max_det)
    return predict_files(seg, images, output, infer,
                         items=lambda d: _items(d, seg.classes), draw=_draw(seg), file="segments.json",
                         batch_size=batch_size)


def predict_segment_video(checkpoint: str | os.PathLike, reader: FrameReader, output: str | os.PathLike, *,
                          conf: float = 0.25, iou: float = 0.7, max_det: int = 300, runtime: Runtime | None = None
                          ) -> StreamResult:
    """Instance masks for every frame of ``reader`` (a video, frames, a camera or a stream): ``OUT/STEM.mp4``
    with masks and boxes drawn and ``OUT/STEM.jsonl``, one line per frame (``{"frame", "time",
    "detections"}``, the detections as :func:`predict_segments` gives them). ``runtime``: the network run
    there."""
    seg, network = predictor(checkpoint, runtime, load_segmenter)
    infer = inference(seg, network, segments_of_batch, conf=conf, iou=iou, max_det=max_det)
    return predict_frames(seg, reader, output, infer,
                          items=lambda d: _items(d, seg.classes), draw=_draw(seg))


def eval_listing(report: dict[str, Any]) -> Listing:
    """The per-class box and mask AP table of an :func:`evaluate_segmenter` report, and its mAP line."""
    return map_listing(report, "instances", ("box", ""), ("mask", "mask"))

