"""Loading a trained classification run: evaluation on a folder, top-k predictions for images.

A run's ``best.ckpt`` / ``last.ckpt`` holds the model's name and arguments, the class names and the
data's evaluation settings beside the weights; it is read with ``torch.load(weights_only=True)``, and
the EMA weights are used when the run kept an EMA.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader

from vision_attn.data import IMAGENET_MEAN, IMAGENET_STD, ImageFolder, eval_transforms, image_paths, load_image, scan_folder
from vision_attn.data.calibration import folder_calibration, labelled_folder
from vision_attn.data.naflex import NaFlexCollate
from vision_attn.data.naflex_budget import naflex_eval_len
from vision_attn.data.transforms import naflex_transforms
from vision_attn.data.video import FrameReader
from vision_attn.errors import CheckpointError, ConfigError
from vision_attn.tasks.classify.plots import draw_caption
from vision_attn.tasks.classify.network import build_network
from vision_attn.tasks.runs import Run, Runtime, load_run_weights, read_task_checkpoint
from vision_attn.tasks.stream import StreamResult, predict_stream
from vision_attn.tasks.task import Listing, Options

__all__ = ["load_classifier", "load_classifier_run", "evaluate_classifier", "predict_images", "accuracy_report",
           "eval_listing", "evaluate", "predict", "predict_video", "PREDICTION"]


def load_classifier_run(ckpt: dict[str, Any], path: Path, *, device: str | torch.device = "cpu",
                        weights: bool = True) -> Run:
    """The classification run of the checkpoint dict ``ckpt`` (read from ``path``): its network rebuilt
    from the recorded name and arguments on ``device`` (with the run's weights unless ``weights`` is
    False, e.g. on the meta device to count FLOPs), class names, input size and evaluation pipeline."""
    hp = dict(ckpt.get("hyper_parameters") or {})
    if "name" not in hp:
        raise CheckpointError(f"{path}: a checkpoint without a model name in its hyper-parameters (not a vision_attn "
                              "classification run); for plain weights use create_model(name, pretrained=PATH)")
    data_hp = dict(ckpt.get("datamodule_hyper_parameters") or {})
    with torch.device(device):
        model = build_network(hp["name"], hp.get("model_kwargs"), attention=hp.get("attention"), pretrained=None,
                              num_classes=hp["num_classes"], img_size=hp.get("img_size"), yaml=hp.get("yaml"),
                              scale=hp.get("yaml_scale"))
    if weights:
        load_run_weights(model, ckpt["state_dict"], f"{path}: the weights do not fit {hp['name']}")
    size = data_hp.get("img_size", hp.get("img_size") or 224)
    mean = tuple(data_hp.get("mean", IMAGENET_MEAN))
    std = tuple(data_hp.get("std", IMAGENET_STD))
    transform = eval_transforms(size, crop_pct=data_hp.get("crop_pct", 0.875), mean=mean, std=std,
                                interpolation=data_hp.get("interpolation", "bicubic"))
    if data_hp.get("naflex"):  # the run validated on NaFlex batches: so are its eval and predictions
        transform = naflex_transforms(mean=mean, std=std)
    classes = list(hp.get("class_names") or [str(i) for i in range(hp["num_classes"])])
    hw = (int(size), int(size)) if isinstance(size, int) else (int(size[0]), int(size[-1]))
    return Run("cls", model.eval(), classes, hw, f"{hp['name']} ({path.parent.name}/{path.name})", path, hp, data_hp,
               mean=mean, std=std, transform=transform, size_recorded=hp.get("img_size") is not None or bool(data_hp))


def _naflex(clf: Run, runtime: Runtime | None) -> NaFlexCollate | None:
    """The collate of a run trained with ``data.naflex`` (None: square images); such a run runs in PyTorch."""
    budget = naflex_eval_len(clf.data_hparams.get("naflex"))
    if budget and runtime is not None:
        raise ConfigError(f"{clf.path}: a data.naflex run takes patch sequences of many lengths, which exported "
                          f"graphs do not: leave out --runtime")
    return NaFlexCollate(int(clf.data_hparams.get("naflex_patch") or 16), budget) if budget else None


def load_classifier(path: str | os.PathLike) -> Run:
    """The classification run at ``path`` (``runs/NAME/best.ckpt`` or the run folder), its network in
    eval mode with the EMA weights when the run kept them."""
    ckpt, file = read_task_checkpoint(path, "cls")
    return load_classifier_run(ckpt, file)


def accuracy_report(confusion: torch.Tensor, classes: Sequence[str]) -> dict[str, Any]:
    """Top-1 and per-class accuracy from a (C, C) confusion matrix (rows: true class)."""
    confusion = confusion.to(torch.int64)
    per_class_n = confusion.sum(dim=1)
    correct = confusion.diagonal()
    total = int(per_class_n.sum())
    per_class = {c: (float(correct[i] / per_class_n[i]) if per_class_n[i] else None) for i, c in enumerate(classes)}
    return {"top1": float(correct.sum()) / total if total else math.nan, "images": total,
            "per_class_accuracy": per_class, "per_class_images": {c: int(per_class_n[i]) for i, c in enumerate(classes)}}


@torch.no_grad()
def evaluate_classifier(checkpoint: str | os.PathLike, data: str | os.PathLike, *, batch_size: int = 64,
                        num_workers: int = 0, runtime: Runtime | None = None) -> dict[str, Any]:
    """Top-1, top-5 and per-class accuracy of a run's checkpoint on ``data``: the ``val/`` folder of a
    root that has one (``demo:digits`` included), else the class folders of ``data`` itself; its class
    names must be among the checkpoint's. ``runtime``: the network run there (calibrated, where it
    calibrates, on 256 of ``data``'s training images)."""
    clf = load_classifier(checkpoint)
    collate = _naflex(clf, runtime)
    network = None if runtime is None else runtime(
        clf.model, clf.img_size, lambda: folder_calibration(data, clf.transform, clf.classes, images=256))
    folder = labelled_folder(data, "val")
    scan = scan_folder(folder, classes=clf.classes, role="eval")
    loader = DataLoader(ImageFolder(scan.samples, clf.classes, clf.transform), batch_size=batch_size,
                        num_workers=num_workers, collate_fn=collate)
    n = len(clf.classes)
    k = min(5, n)
    confusion = torch.zeros(n, n, dtype=torch.int64)
    top5 = 0
    for x, y in loader:
        logits = (network or clf.model)(x)
        pred = logits.argmax(dim=-1)
        confusion += torch.bincount(y * n + pred, minlength=n * n).reshape(n, n)
        top5 += int((logits.topk(k, dim=-1).indices == y[:, None]).any(dim=-1).sum())
    report = accuracy_report(confusion, clf.classes)
    report.update(top5=top5 / max(report["images"], 1), checkpoint=str(checkpoint), data=str(folder),
                  model=clf.hparams["name"], confusion=confusion.tolist())
    return report


def _top_k(clf: Run, images: Sequence[np.ndarray], k: int, network: Callable[[torch.Tensor], torch.Tensor] | None
           ) -> list[list[dict[str, Any]]]:
    """The ``k`` most probable labels of each (H, W, 3) uint8 RGB image, by ``clf.model`` or ``network``:
    ``[{"label", "index", "prob"}]``."""
    tensors = [clf.transform(image=image)["image"] for image in images]
    collate = _naflex(clf, None)
    x = collate([(t, 0) for t in tensors])[0] if collate is not None else torch.stack(tensors)  # (B, 3, H, W)
    probs = (network or clf.model)(x).float().softmax(dim=-1)
    values, indices = probs.topk(k, dim=-1)
    return [[{"label": clf.classes[j], "index": j, "prob": round(pv, 6)} for pv, j in zip(v, i)]
            for v, i in zip(values.tolist(), indices.tolist())]


@torch.no_grad()
def predict_images(checkpoint: str | os.PathLike, images: Sequence[str | os.PathLike], *, top_k: int = 5,
                   batch_size: int = 32, runtime: Runtime | None = None) -> list[dict[str, Any]]:
    """Top-k labels with probabilities for image files (folders are searched for images):
    ``[{"image": path, "top": [{"label", "index", "prob"}, ...]}, ...]``. ``runtime``: run the
    network there instead of in PyTorch."""
    clf = load_classifier(checkpoint)
    _naflex(clf, runtime)
    network = None if runtime is None else runtime(clf.model, clf.img_size, None)
    paths = image_paths(images)
    k = max(1, min(top_k, len(clf.classes)))
    results = []
    for start in range(0, len(paths), batch_size):
        chunk = paths[start:start + batch_size]
        for p, top in zip(chunk, _top_k(clf, [load_image(p) for p in chunk], k, network)):
            results.append({"image": str(p), "top": top})
    return results


@torch.no_grad()
def predict_classification_video(checkpoint: str | os.PathLike, reader: FrameReader, output: str | os.PathLike, *,
                                 top_k: int = 5, runtime: Runtime | None = None) -> StreamResult:
    """Top-k labels for every frame of ``reader`` (a video, frames, a camera or a stream):
    ``OUT/STEM.mp4`` with the top labels written on each frame and ``OUT/STEM.jsonl``, one line per
    frame (``{"frame", "time", "top"}``); see :func:`~vision_attn.tasks.stream.predict_stream`.
    ``runtime``: as in :func:`predict_images`."""
    clf = load_classifier(checkpoint)
    _naflex(clf, runtime)
    network = None if runtime is None else runtime(clf.model, clf.img_size, None)
    k = max(1, min(top_k, len(clf.classes)))
    return predict_stream(reader, output, infer=lambda frames: _top_k(clf, frames, k, network),
                          draw=lambda frame, top: draw_caption(frame, [f"{t['label']} {t['prob']:.2f}" for t in top]),
                          record=lambda top: {"top": top})


def evaluate(checkpoint: str | os.PathLike, data: str | os.PathLike, options: Options,
             runtime: Runtime | None) -> dict[str, Any]:
    """:func:`evaluate_classifier` as ``vision-attn eval cls`` asks it."""
    return evaluate_classifier(checkpoint, data, batch_size=options.batch_size or 64,
                               num_workers=options.num_workers, runtime=runtime)


def eval_listing(report: dict[str, Any]) -> Listing:
    """The per-class accuracy table of an :func:`evaluate_classifier` report, and its top-1/top-5 line."""
    rows = [(name, str(report["per_class_images"][name]), "n/a" if acc is None else f"{100 * acc:.1f}%")
            for name, acc in report["per_class_accuracy"].items()]
    return Listing(f"{report['model']} on {report['data']} ({report['images']} images)",
                   ("class", "images", "accuracy"), rows,
                   f"top-1 {100 * report['top1']:.2f}%, top-5 {100 * report['top5']:.2f}%")


def predict(checkpoint: str | os.PathLike, images: Sequence[str | os.PathLike], options: Options,
            runtime: Runtime | None) -> list[dict[str, Any]]:
    """:func:`predict_images` as ``vision-attn predict cls`` asks it."""
    return predict_images(checkpoint, images, top_k=options.top_k, batch_size=options.batch_size or 32,
                          runtime=runtime)


def predict_video(checkpoint: str | os.PathLike, reader: FrameReader, output: str | os.PathLike, options: Options,
                  runtime: Runtime | None) -> StreamResult:
    """:func:`predict_classification_video` as ``vision-attn predict cls`` asks it."""
    return predict_classification_video(checkpoint, reader, output, top_k=options.top_k, runtime=runtime)


PREDICTION = ("top-{k} (probability)", lambda r: ", ".join(f"{t['label']} ({t['prob']:.3f})" for t in r["top"]))
"""The column of ``predict cls``'s table: its header and one image's cell."""
