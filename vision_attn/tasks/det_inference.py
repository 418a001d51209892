"""A trained detector from a run's checkpoint: COCO evaluation on a data set, detections for images.

A detection run's ``best.ckpt`` / ``last.ckpt`` holds the detector YAML's text, its scale, the class
names and the data's image size beside the weights; it is read with ``torch.load(weights_only=True)``
and the EMA weights are used when the run kept an EMA.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from vision_attn.data.detection import DetectionDataset, DetectionRecord, DetectionStats, collate_detection
from vision_attn.errors import CheckpointError, DataError
from vision_attn.io.atomic import write_json
from vision_attn.io.ultralytics_pt import is_ultralytics_checkpoint
from vision_attn.models.yolo.builder import build_detector
from vision_attn.models.yolo.from_ultralytics import detector_from_ultralytics
from vision_attn.models.yolo.postprocess import postprocess, to_original
from vision_attn.tasks.inference import image_paths, load_run_checkpoint, load_run_weights

__all__ = ["Detector", "load_detector", "evaluate_detector", "predict_detections", "ImageList"]


@dataclass
class Detector:
    """A detector in eval mode with its class names, image size and training arguments."""

    model: nn.Module
    names: list[str]
    img_size: int
    hparams: dict[str, Any]
    data_hparams: dict[str, Any]


def detector_checkpoint(yaml_text: str, state: dict[str, torch.Tensor], *, names: Sequence[str], img_size: int,
                        scale: str | None = None, source: str = "checkpoint") -> dict[str, Any]:
    """A detection checkpoint in the layout of a run's ``best.ckpt`` (what :func:`load_detector` and
    ``model.pretrained`` read): the YAML's text, the class names, the image size and every tensor of
    the model built from ``yaml_text``, those of ``state`` loaded (the rest, rows ``state`` lacks, at
    their initialisation)."""
    model = build_detector(yaml_text, scale=scale, num_classes=len(names))
    own = model.state_dict()
    unknown = [k for k in state if k not in own or tuple(own[k].shape) != tuple(state[k].shape)]
    if unknown:
        raise CheckpointError(f"{source}: {len(unknown)} tensor(s) do not fit the edited detector "
                              f"({', '.join(unknown[:4])}); the YAML and the weights are of different models")
    model.load_state_dict(state, strict=False)
    return {"detector_yaml": yaml_text, "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
            "hyper_parameters": {"scale": model.scale, "num_classes": len(names), "class_names": list(names),
                                 "source": source},
            "datamodule_hyper_parameters": {"img_size": int(img_size)}}


def _ultralytics_detector(path: Path) -> Detector:
    loaded = detector_from_ultralytics(path)
    ckpt = loaded.checkpoint
    hp = {"scale": loaded.model.scale, "num_classes": ckpt.nc, "class_names": ckpt.names, "source": str(path),
          "train_args": ckpt.train_args}
    return Detector(loaded.model.eval(), ckpt.names, ckpt.img_size, hp, {"img_size": ckpt.img_size})


def load_detector(path: str | os.PathLike) -> Detector:
    """The detector of a detection run's checkpoint (``runs/NAME/best.ckpt`` or the run folder), of a
    :func:`detector_checkpoint` file, or of an ultralytics ``.pt`` (read without ultralytics)."""
    if is_ultralytics_checkpoint(path):
        return _ultralytics_detector(Path(path))
    ckpt, p = load_run_checkpoint(path)
    if not isinstance(ckpt, dict) or "detector_yaml" not in ckpt or "state_dict" not in ckpt:
        if isinstance(ckpt, dict) and "name" in ckpt.get("hyper_parameters", {}):
            raise CheckpointError(f"{p}: a classification checkpoint; use `vision-attn eval cls` / `predict cls`")
        raise CheckpointError(f"{p}: not a vision_attn detection checkpoint (no detector YAML and state_dict)")
    hp = dict(ckpt["hyper_parameters"])
    data_hp = dict(ckpt.get("datamodule_hyper_parameters") or {})
    model = build_detector(ckpt["detector_yaml"], scale=hp.get("scale"), num_classes=hp["num_classes"])
    load_run_weights(model, ckpt["state_dict"], f"{p}: the weights do not fit the detector")
    names = list(hp.get("class_names") or [str(i) for i in range(hp["num_classes"])])
    return Detector(model.eval(), names, int(data_hp.get("img_size", 640)), hp, data_hp)


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


@torch.no_grad()
def _run(det: Detector, dataset: DetectionDataset, *, batch_size: int, num_workers: int, conf: float, iou: float,
         max_det: int, multi_label: bool) -> list[dict[str, Any]]:
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collate_detection)
    out = []
    for batch in loader:
        x = batch["images"].contiguous(memory_format=torch.channels_last)
        for d, iid, size, scale, pad in zip(postprocess(det.model(x), conf=conf, iou=iou, max_det=max_det,
                                                        multi_label=multi_label),
                                            batch["image_ids"], batch["orig_sizes"], batch["scales"], batch["pads"]):
            out.append({"image_id": int(iid), "boxes": to_original(d.boxes, scale=scale, pad=pad, orig_size=size).numpy(),
                        "scores": d.scores.numpy(), "labels": d.labels.numpy()})
    return out


def evaluate_detector(checkpoint: str | os.PathLike, data: str | os.PathLike, *, split: str = "val",
                      fmt: str = "auto", batch_size: int = 32, num_workers: int = 0, conf: float = 0.001,
                      iou: float = 0.7, max_det: int = 300, backend: str = "faster") -> dict[str, Any]:
    """COCO mAP@[.5:.95], mAP@.5 and per-class AP of a run's checkpoint on the ``split`` of ``data``
    (``demo:digit-boxes``, a YOLO data YAML or a COCO folder); its classes must be the checkpoint's.
    ``backend``: ``faster`` (faster-coco-eval) or ``pycocotools``, the same numbers."""
    from vision_attn.data import DetectionTransform, open_detection
    from vision_attn.evaluation import coco_map

    det = load_detector(checkpoint)
    dataset = open_detection(data, split, fmt=fmt, transform=DetectionTransform(det.img_size))
    if list(dataset.names) != det.names:
        raise DataError(f"{data} ({split}) has classes {list(dataset.names)} but the checkpoint was trained on "
                        f"{det.names}; evaluate on data with the same classes in the same order")
    dets = _run(det, dataset, batch_size=batch_size, num_workers=num_workers, conf=conf, iou=iou, max_det=max_det,
                multi_label=True)
    report = coco_map(dataset.ground_truth(), dets, names=dataset.names, category_ids=dataset.category_ids,
                      backend=backend)
    return {"checkpoint": str(checkpoint), "data": str(data), "split": split, "images": len(dataset),
            "map": float(report.map), "map50": float(report.map50), "per_class": report.as_dict()["per_class"],
            "table": report.table()}


def predict_detections(checkpoint: str | os.PathLike, images: Sequence[str | os.PathLike], *,
                       output: str | os.PathLike | None = None, conf: float = 0.25, iou: float = 0.7,
                       max_det: int = 300, batch_size: int = 16) -> list[dict[str, Any]]:
    """Detections for image files (folders are searched): ``[{"image", "width", "height", "detections":
    [{"box": [x1, y1, x2, y2], "score", "label", "class"}]}]`` in original pixels. With ``output``, each
    image with its boxes drawn is written there under its own name, and the list as ``detections.json``."""
    from vision_attn.data import DetectionTransform
    from vision_attn.data.detection import read_image
    from vision_attn.tasks.det_plots import draw_boxes, save_image

    det = load_detector(checkpoint)
    paths = image_paths(images)
    dataset = ImageList(paths, transform=DetectionTransform(det.img_size))
    found = _run(det, dataset, batch_size=batch_size, num_workers=0, conf=conf, iou=iou, max_det=max_det,
                 multi_label=False)
    out_dir = Path(output) if output is not None else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    used: set[str] = set()
    for rec, d in zip(dataset.records, found):
        items = [{"box": [round(float(v), 2) for v in box], "score": round(float(s), 5), "label": int(lb),
                  "class": det.names[int(lb)]} for box, s, lb in zip(d["boxes"], d["scores"], d["labels"])]
        entry = {"image": str(rec.path), "width": rec.width, "height": rec.height, "detections": items}
        if out_dir is not None:
            name = f"{rec.path.stem}.png" if f"{rec.path.stem}.png" not in used else f"{rec.path.stem}_{rec.image_id}.png"
            used.add(name)
            drawn = draw_boxes(read_image(rec.path), d["boxes"], d["labels"], det.names, d["scores"], thickness=2)
            entry["drawn"] = str(save_image(drawn, out_dir / name))
        results.append(entry)
    if out_dir is not None:
        write_json(out_dir / "detections.json", results)
    return results
