"""A trained detector from a run's checkpoint: COCO evaluation on a data set, detections for images.

A detection run's ``best.ckpt`` / ``last.ckpt`` holds the detector YAML's text, its scale, the class
names and the data's image size beside the weights; it is read with ``torch.load(weights_only=True)``
and the EMA weights are used when the run kept an EMA. An end-to-end detector (YOLO26, YOLOv10) gives
its detections without NMS (the top-k of its one-to-one branch, ``postprocess(end2end=True)``). An
ultralytics ``.pt`` (read without ultralytics by :mod:`vision_attn.io.ultralytics_pt`) is laid out as
such a checkpoint by :func:`ultralytics_run_checkpoint`.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader

from vision_attn.data import DetectionTransform, image_paths, open_detection
from vision_attn.data.calibration import detection_calibration
from vision_attn.data.video import FrameReader
from vision_attn.data.detection import (DetectionDataset, DetectionRecord, DetectionStats, collate_detection,
                                       read_image)
from vision_attn.evaluation import coco_map
from vision_attn.errors import CheckpointError, DataError
from vision_attn.io.atomic import write_json
from vision_attn.io.resources import resolve_path
from vision_attn.io.ultralytics_pt import UltralyticsCheckpoint
from vision_attn.models.yolo import build_detector, load_yaml
from vision_attn.models.yolo.backbone import without_backbone_weights
from vision_attn.models.yolo.fuse import fuse_conv_bn
from vision_attn.models.yolo.postprocess import is_end_to_end, postprocess, to_original
from vision_attn.tasks.detect.plots import draw_boxes, save_image
from vision_attn.tasks.runs import Run, Runtime, load_run_weights, read_task_checkpoint
from vision_attn.tasks.stream import StreamResult, predict_stream
from vision_attn.tasks.task import Listing, Options

__all__ = ["load_detector", "load_detector_run", "load_headed_run", "detector_checkpoint", "ultralytics_run_checkpoint",
           "evaluate_detector", "predict_detections", "predict_detection_video", "ImageList", "FrameList", "OfBatch",
           "detections_of_batch", "batched", "inference", "evaluation_set", "predict_files", "predict_frames",
           "map_listing"]


def _run_checkpoint(model_yaml: dict[str, Any], scale: str | None, state: dict[str, torch.Tensor], *,
                    names: Sequence[str], num_classes: int, img_size: int, source: str,
                    **hyper_parameters: Any) -> dict[str, Any]:
    """The layout of a detection run's ``best.ckpt`` (what :func:`load_detector_run` reads): the task,
    the model YAML dict and scale, the network's weights under Lightning's ``model.`` prefix, the class
    names and count, where the weights came from (and ``hyper_parameters``) and the image size."""
    return {"task": "det", "model_yaml": model_yaml, "model_scale": scale,
            "state_dict": {f"model.{k}": v for k, v in state.items()},
            "hyper_parameters": {"scale": scale, "num_classes": num_classes, "class_names": list(names),
                                 "source": source, **hyper_parameters},
            "datamodule_hyper_parameters": {"img_size": int(img_size)}}


def ultralytics_run_checkpoint(ckpt: UltralyticsCheckpoint) -> dict[str, Any]:
    """An ultralytics ``.pt`` (already read) as a detection run's checkpoint: its model YAML dict and
    scale, its float32 weights, class names, training arguments and training image size."""
    return _run_checkpoint(ckpt.yaml, ckpt.scale, ckpt.state_dict, names=ckpt.names, num_classes=ckpt.nc,
                           img_size=ckpt.img_size, source=str(ckpt.path), train_args=ckpt.train_args)


def detector_checkpoint(yaml_text: str, state: dict[str, torch.Tensor], *, names: Sequence[str], img_size: int,
                        scale: str | None = None, source: str = "checkpoint") -> dict[str, Any]:
    """A detection checkpoint in the layout of a run's ``best.ckpt`` (what :func:`load_detector` and
    ``model.pretrained`` read): the YAML's model dict and scale, the class names, the image size and every tensor of
    the model built from ``yaml_text``, those of ``state`` loaded (the rest, rows ``state`` lacks, at
    their initialisation)."""
    model = build_detector(yaml_text, scale=scale, num_classes=len(names))
    own = model.state_dict()
    unknown = [k for k in state if k not in own or tuple(own[k].shape) != tuple(state[k].shape)]
    if unknown:
        raise CheckpointError(f"{source}: {len(unknown)} tensor(s) do not fit the edited detector "
                              f"({', '.join(unknown[:4])}); the YAML and the weights are of different models")
    model.load_state_dict(state, strict=False)
    return _run_checkpoint(load_yaml(yaml_text)[0], model.scale, model.state_dict(), names=names,
                           num_classes=len(names), img_size=img_size, source=source)


def load_detector_run(ckpt: dict[str, Any] | UltralyticsCheckpoint, path: Path, *,
                      device: str | torch.device = "cpu", weights: bool = True) -> Run:
    """The detection run of the checkpoint dict ``ckpt`` (read from ``path``; an ultralytics ``.pt``'s
    checkpoint is laid out as one first): the detector rebuilt from the YAML dict (or, in older
    checkpoints, text) and scale it records, on ``device`` (with the run's weights unless ``weights`` is
    False), its class names and input size."""
    if isinstance(ckpt, UltralyticsCheckpoint):
        ckpt = ultralytics_run_checkpoint(ckpt)
    hp = dict(ckpt.get("hyper_parameters") or {})
    description = ckpt.get("model_yaml", ckpt.get("detector_yaml"))
    if description is None and isinstance(hp.get("yaml"), str):  # checkpoints from before the record: the path
        description = resolve_path(hp["yaml"], base=path.parent, kinds=("model",))
        if description is None:
            raise CheckpointError(f"{path}: its model YAML {hp['yaml']} is not there any more (a checkpoint from "
                                  "before vision_attn recorded the YAML itself); give the YAML itself")
    if description is None:
        raise CheckpointError(f"{path}: not a vision_attn detection checkpoint (no detector YAML and state_dict)")
    if weights and isinstance(description, dict):  # the run's weights replace a Backbone row's pretrained file
        description = without_backbone_weights(description)
    data_hp = dict(ckpt.get("datamodule_hyper_parameters") or {})
    with torch.device(device):
        model = build_detector(description, scale=ckpt.get("model_scale", hp.get("scale")),
                               num_classes=hp["num_classes"])
    if weights:
        load_run_weights(model, ckpt["state_dict"], f"{path}: the weights do not fit the detector")
    names = list(hp.get("class_names") or [str(i) for i in range(hp["num_classes"])])
    size = int(data_hp.get("img_size", 640))
    label = f"{Path(str(hp.get('yaml', 'detector'))).name} scale {model.scale or '-'} ({path.parent.name}/{path.name})"
    return Run("det", model.eval(), names, (size, size), label, path, hp, data_hp, mean=(0.0, 0.0, 0.0),
               std=(1.0, 1.0, 1.0))


def load_headed_run(ckpt: dict[str, Any] | UltralyticsCheckpoint, path: Path, *, device: str | torch.device,
                    weights: bool, task: str, head: type, wrong: str) -> Run:
    """The run of a detection-like ``task`` from its checkpoint (:func:`load_detector_run`), whose network must
    end in a ``head``; else a :class:`CheckpointError` ``PATH: its model ends in CLASS, not WRONG``."""
    run = load_detector_run(ckpt, path, device=device, weights=weights)
    if not isinstance(run.model.model[-1], head):
        raise CheckpointError(f"{path}: its model ends in {type(run.model.model[-1]).__name__}, not {wrong}")
    return dataclasses.replace(run, task=task)


def load_detector(path: str | os.PathLike) -> Run:
    """The detection run at ``path`` (``runs/NAME/best.ckpt`` or the run folder), a
    :func:`detector_checkpoint` file or an ultralytics ``.pt``."""
    ckpt, file = read_task_checkpoint(path, "det")
    return load_detector_run(ckpt, file)


class ImageList(DetectionDataset):
    """Image files (no boxes) as a detection data set, for prediction."""

    def __init__(self, paths: Sequence[Path], transform: Any = None) -> None:
        from PIL import Image

        super().__init__(transform)
        self.names, self.category_ids = [], []
        self.records = []
        for i, path in enumerate(paths):
            try:
                with Image.open(path) as im:
                    width, height = im.size
            except Exception:  # noqa: BLE001 - any unreadable image is one error
                raise DataError(f"image {path}: cannot be decoded; replace it or leave it out") from None
            self.records.append(DetectionRecord(path, i + 1, height, width, np.zeros((0, 4), np.float32),
                                                np.zeros(0, np.int64)))
        self.stats = DetectionStats(images=len(self.records))


class FrameList(DetectionDataset):
    """Decoded frames (H, W, 3) uint8 RGB of one size as a detection data set, for prediction."""

    def __init__(self, frames: Sequence[np.ndarray], transform: Any = None) -> None:
        super().__init__(transform)
        self.names, self.category_ids = [], []
        self.frames = list(frames)
        self.records = [DetectionRecord(Path(f"frame{i}"), i + 1, f.shape[0], f.shape[1], np.zeros((0, 4), np.float32),
                                        np.zeros(0, np.int64)) for i, f in enumerate(self.frames)]
        self.stats = DetectionStats(images=len(self.records))

    def load(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rec = self.records[index]
        return self.frames[index], rec.boxes, rec.labels


OfBatch = Callable[..., list[dict[str, Any]]]
"""A detection-like task's results of one batch: ``of_batch(output, model, batch, *, conf, iou, max_det,
multi_label)`` -> one dict per image in original pixels (its network-input copies under ``input_*`` keys)."""


def detections_of_batch(pred: torch.Tensor, model: torch.nn.Module, batch: dict[str, Any], *, conf: float,
                        iou: float, max_det: int, multi_label: bool) -> list[dict[str, Any]]:
    """A detector's eval output (B, 4 + nc, A) for a collated batch -> per image ``{image_id, boxes, scores,
    labels}`` in original pixels (numpy), plus ``input_boxes`` in network-input pixels (NMS-free top-k for an
    end-to-end head)."""
    dets = postprocess(pred, conf=conf, iou=iou, max_det=max_det, multi_label=multi_label,
                       end2end=is_end_to_end(model))
    return [{"image_id": int(iid), "boxes": to_original(d.boxes, scale=scale, pad=pad, orig_size=size).cpu().numpy(),
             "scores": d.scores.cpu().numpy(), "labels": d.labels.cpu().numpy(), "input_boxes": d.boxes.cpu().numpy()}
            for d, iid, size, scale, pad in zip(dets, batch["image_ids"], batch["orig_sizes"], batch["scales"],
                                                batch["pads"])]


@torch.no_grad()
def batched(run: Run, dataset: DetectionDataset, of_batch: OfBatch, *, batch_size: int, num_workers: int,
            conf: float, iou: float, max_det: int, multi_label: bool,
            network: Callable[[torch.Tensor], Any] | None = None) -> list[dict[str, Any]]:
    """``of_batch`` over the collated batches of ``dataset``, on the output of ``run``'s network (or of
    ``network``: another runtime's export of it) for the batch's images; the results of all batches in order."""
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collate_detection)
    net = network or run.model
    out: list[dict[str, Any]] = []
    for batch in loader:
        out.extend(of_batch(net(batch["images"].contiguous(memory_format=torch.channels_last)), run.model, batch,
                            conf=conf, iou=iou, max_det=max_det, multi_label=multi_label))
    return out


def inference(run: Run, network: Callable[[torch.Tensor], Any] | None, of_batch: OfBatch, *, conf: float,
              iou: float, max_det: int) -> Callable[[DetectionDataset, int], list[dict[str, Any]]]:
    """What prediction runs on a data set of images, in batches of the size given: each image's best-class
    results by ``of_batch``."""
    return lambda dataset, batch_size: batched(run, dataset, of_batch, batch_size=batch_size, num_workers=0,
                                               conf=conf, iou=iou, max_det=max_det, multi_label=False, network=network)


def evaluation_set(checkpoint: str | os.PathLike, data: str | os.PathLike, load: Callable[[str | os.PathLike], Run],
                   *, split: str, fmt: str, runtime: Runtime | None, **flags: bool
                   ) -> tuple[Run, Callable[[torch.Tensor], Any] | None, DetectionDataset]:
    """What a detection-like task's evaluation runs on: the run of ``checkpoint`` (read by ``load``), its
    network in ``runtime`` (calibrated, where it calibrates, on 128 of ``data``'s training images) or None,
    and the ``split`` of ``data`` letterboxed to the run's size, read with the task's ``flags`` (``masks``,
    ``keypoints``, ``obb``); a set whose classes are not the run's is a :class:`DataError`."""
    run = load(checkpoint)
    network = None if runtime is None else runtime(
        run.model, run.img_size, lambda: detection_calibration(data, run.img_size[0], images=128))
    dataset = open_detection(data, split, fmt=fmt, transform=DetectionTransform(run.img_size[0], **flags), **flags)
    if list(dataset.names) != run.classes:
        raise DataError(f"{data} ({split}) has classes {list(dataset.names)} but the checkpoint was trained on "
                        f"{run.classes}; evaluate on data with the same classes in the same order")
    return run, network, dataset


def evaluate_detector(checkpoint: str | os.PathLike, data: str | os.PathLike, *, split: str = "val",
                      fmt: str = "auto", batch_size: int = 32, num_workers: int = 0, conf: float = 0.001,
                      iou: float = 0.7, max_det: int = 300, backend: str = "faster",
                      runtime: Runtime | None = None) -> dict[str, Any]:
    """COCO mAP@[.5:.95], mAP@.5 and per-class AP of a run's checkpoint on the ``split`` of ``data``
    (``demo:digit-boxes``, a YOLO data YAML or a COCO folder); its classes must be the checkpoint's.
    ``backend``: ``faster`` (faster-coco-eval) or ``pycocotools``, the same numbers. ``runtime``: the
    network run there (calibrated, where it calibrates, on 128 of ``data``'s training images)."""
    det, network, dataset = evaluation_set(checkpoint, data, load_detector, split=split, fmt=fmt, runtime=runtime)
    dets = batched(det, dataset, detections_of_batch, batch_size=batch_size, num_workers=num_workers, conf=conf,
                   iou=iou, max_det=max_det, multi_label=True, network=network)
    report = coco_map(dataset.ground_truth(), dets, names=dataset.names, category_ids=dataset.category_ids,
                      backend=backend)
    return {"checkpoint": str(checkpoint), "data": str(data), "split": split, "images": len(dataset),
            "detections": sum(len(d["scores"]) for d in dets), "map": float(report.map), "map50": float(report.map50), "per_class": report.as_dict()["per_class"],
            "table": report.table()}


def predictor(checkpoint: str | os.PathLike, runtime: Runtime | None,
              load: Callable[[str | os.PathLike], Run] = load_detector) -> tuple[Run, Callable[[torch.Tensor], Any] | None]:
    """The run of ``checkpoint`` (read by ``load``: a detector, or the segmentation task's loader) for
    prediction (batch norms folded into their convolutions) and, with ``runtime``, its network in that
    runtime, for square inputs of the run's image size."""
    det = load(checkpoint)
    fuse_conv_bn(det.model)
    return det, None if runtime is None else runtime(det.model, det.img_size, None)


def _stride(det: Run) -> int:
    """The detector's largest stride: what a rectangular input's sides must be multiples of."""
    return int(max(det.model.stride))


def _items(d: dict[str, np.ndarray], classes: Sequence[str]) -> list[dict[str, Any]]:
    """One image's detections as JSON: ``[{"box": [x1, y1, x2, y2], "score", "label", "class"}]``."""
    return [{"box": [round(float(v), 2) for v in box], "score": round(float(s), 5), "label": int(lb),
             "class": classes[int(lb)]} for box, s, lb in zip(d["boxes"], d["scores"], d["labels"])]


def predict_detections(checkpoint: str | os.PathLike, images: Sequence[str | os.PathLike], *,
                       output: str | os.PathLike | None = None, conf: float = 0.25, iou: float = 0.7,
                       max_det: int = 300, batch_size: int = 16, runtime: Runtime | None = None) -> list[dict[str, Any]]:
    """Detections for image files (folders are searched): ``[{"image", "width", "height", "detections":
    [{"box": [x1, y1, x2, y2], "score", "label", "class"}]}]`` in original pixels. With ``output``, each
    image with its boxes drawn is written there under its own name, and the list as ``detections.json``.
    ``runtime``: run the network there (square inputs of the run's size) instead of in PyTorch."""
    det, network = predictor(checkpoint, runtime)
    paths = image_paths(images)
    dataset = ImageList(paths)
    rect = len({(r.height, r.width) for r in dataset.records}) == 1 and network is None
    dataset.transform = DetectionTransform(det.img_size[0], stride=_stride(det) if rect else None)
    found = inference(det, network, detections_of_batch, conf=conf, iou=iou, max_det=max_det)(dataset, batch_size)
    return image_results(dataset.records, found, output, items=lambda d: _items(d, det.classes),
                         draw=lambda image, d: draw_boxes(image, d["boxes"], d["labels"], det.classes, d["scores"],
                                                          thickness=2), file="detections.json")


def image_results(records: Sequence[Any], found: Sequence[dict[str, Any]], output: str | os.PathLike | None, *,
                  items: Callable[[dict[str, Any]], list[dict[str, Any]]],
                  draw: Callable[[np.ndarray, dict[str, Any]], np.ndarray], file: str) -> list[dict[str, Any]]:
    """``[{"image", "width", "height", "detections": items(d)}]`` for each image record and its found
    instances ``d``; with ``output``, each image drawn (``draw(image, d)``) is written there under its own
    name (``drawn``), and the list as ``output/file``."""
    out_dir = Path(output) if output is not None else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    used: set[str] = set()
    for rec, d in zip(records, found):
        entry = {"image": str(rec.path), "width": rec.width, "height": rec.height, "detections": items(d)}
        if out_dir is not None:
            name = f"{rec.path.stem}.png" if f"{rec.path.stem}.png" not in used else f"{rec.path.stem}_{rec.image_id}.png"
            used.add(name)
            entry["drawn"] = str(save_image(draw(read_image(rec.path), d), out_dir / name))
        results.append(entry)
    if out_dir is not None:
        write_json(out_dir / file, results)
    return results


def predict_files(run: Run, images: Sequence[str | os.PathLike], output: str | os.PathLike | None,
                  infer: Callable[[DetectionDataset, int], list[dict[str, Any]]], *,
                  items: Callable[[dict[str, Any]], list[dict[str, Any]]],
                  draw: Callable[[np.ndarray, dict[str, Any]], np.ndarray], file: str, batch_size: int
                  ) -> list[dict[str, Any]]:
    """A detection-like task's prediction for image files (folders searched), letterboxed squares of the run's
    size: ``infer(dataset, batch_size)`` finds each image's instances, then :func:`image_results`."""
    dataset = ImageList(image_paths(images))
    dataset.transform = DetectionTransform(run.img_size[0])
    return image_results(dataset.records, infer(dataset, batch_size), output, items=items, draw=draw, file=file)


def predict_frames(run: Run, reader: FrameReader, output: str | os.PathLike,
                   infer: Callable[[DetectionDataset, int], list[dict[str, Any]]], *,
                   items: Callable[[dict[str, Any]], list[dict[str, Any]]],
                   draw: Callable[[np.ndarray, dict[str, Any]], np.ndarray], stride: int | None = None) -> StreamResult:
    """A detection-like task's prediction for every frame of ``reader`` (:func:`predict_stream`, each frame's
    line ``{"frame", "time", "detections": items(d)}``), letterboxed squares of the run's size (``stride``:
    rectangles, their sides multiples of it)."""
    transform = DetectionTransform(run.img_size[0], stride=stride)
    return predict_stream(reader, output, infer=lambda frames: infer(FrameList(frames, transform), len(frames)),
                          draw=draw, record=lambda d: {"detections": items(d)})


def predict_detection_video(checkpoint: str | os.PathLike, reader: FrameReader, output: str | os.PathLike, *,
                            conf: float = 0.25, iou: float = 0.7, max_det: int = 300,
                            runtime: Runtime | None = None) -> StreamResult:
    """Detections for every frame of ``reader`` (a video, frames, a camera or a stream): ``OUT/STEM.mp4``
    with the boxes drawn and ``OUT/STEM.jsonl``, one line per frame (``{"frame", "time", "detections"}``,
    the detections as :func:`predict_detections` gives them); see
    :func:`~vision_attn.tasks.stream.predict_stream` for what is written when a source fails.
    ``runtime``: as in :func:`predict_detections`."""
    det, network = predictor(checkpoint, runtime)
    return predict_frames(det, reader, output, inference(det, network, detections_of_batch, conf=conf, iou=iou,
                                                         max_det=max_det),
                          items=lambda d: _items(d, det.classes),
                          draw=lambda frame, d: draw_boxes(frame, d["boxes"], d["labels"], det.classes, d["scores"],
                                                           thickness=2),
                          stride=_stride(det) if network is None else None)


def detection_calls(evaluate_fn: Callable[..., dict[str, Any]], predict_fn: Callable[..., list[dict[str, Any]]],
                    video_fn: Callable[..., StreamResult]) -> dict[str, Callable[..., Any]]:
    """The Task record's ``evaluate``, ``predict`` and ``predict_video`` (by field name) over a detection-like task's
    functions (``evaluate_detector``, ``predict_detections``, ``predict_detection_video`` or the
    segmentation task's): the command's :class:`Options` passed as their keywords."""

    def evaluate(checkpoint: str | os.PathLike, data: str | os.PathLike, options: Options,
                 runtime: Runtime | None) -> dict[str, Any]:
        return evaluate_fn(checkpoint, data, batch_size=options.batch_size or 32, num_workers=options.num_workers,
                           runtime=runtime)

    def predict(checkpoint: str | os.PathLike, images: Sequence[str | os.PathLike], options: Options,
                runtime: Runtime | None) -> list[dict[str, Any]]:
        return predict_fn(checkpoint, images, output=options.output, conf=options.conf, iou=options.iou,
                          batch_size=options.batch_size or 32, runtime=runtime)

    def predict_video(checkpoint: str | os.PathLike, reader: FrameReader, output: str | os.PathLike,
                      options: Options, runtime: Runtime | None) -> StreamResult:
        return video_fn(checkpoint, reader, output, conf=options.conf, iou=options.iou, runtime=runtime)

    return {"evaluate": evaluate, "predict": predict, "predict_video": predict_video}


def fmt_ap(v: float | None) -> str:
    """An AP as the tables print it (``n/a`` for None or NaN)."""
    return "n/a" if v is None or v != v else f"{v:.3f}"


def map_listing(report: dict[str, Any], column: str, *parts: tuple[str, str]) -> Listing:
    """The per-class AP table of a detection-like task's evaluation report and its mAP line, one (label,
    key) part per mAP it reports: the report's ``KEY_map``, ``KEY_map50`` and ``per_class_KEY`` (the key
    ``""``: ``map``, ``map50``, ``per_class``, the box mAP); ``column``: the header of the instance counts.
    The line names every label, the columns only where there are several parts."""

    def pre(label: str) -> str:
        return f"{label} " if label else ""

    def maps(key: str) -> tuple[float, float]:
        return report[f"{key}_map" if key else "map"], report[f"{key}_map50" if key else "map50"]

    heads = [f"{pre(label) if len(parts) > 1 else ''}{ap}" for label, _ in parts for ap in ("AP@[.5:.95]", "AP@.5")]
    tables = [report[f"per_class_{key}" if key else "per_class"] for _, key in parts]
    rows = [(name, str(row["boxes"]), *(fmt_ap(t[name][ap]) for t in tables for ap in ("ap", "ap50")))
            for name, row in report["per_class"].items()]
    line = "; ".join("{}mAP@[.5:.95] {:.4f}, mAP@.5 {:.4f}".format(pre(label), *maps(key)) for label, key in parts)
    return Listing(f"{report['checkpoint']} on {report['data']} ({report['split']}, {report['images']} images)",
                   ("class", column, *heads), rows, line)


def eval_listing(report: dict[str, Any]) -> Listing:
    """The per-class AP table of an :func:`evaluate_detector` report, and its mAP line."""
    return map_listing(report, "boxes", ("", ""))


def detections_cell(r: dict[str, Any]) -> str:
    """One image's detections in a table cell: ``class score, ...`` (``-`` for none)."""
    return ", ".join(f"{d['class']} {d['score']:.2f}" for d in r["detections"]) or "-"
