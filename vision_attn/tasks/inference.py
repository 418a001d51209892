"""A trained classifier from a run's checkpoint: evaluation on a folder, top-k predictions for images.

A run's ``best.ckpt`` / ``last.ckpt`` holds the model's name and arguments, the class names and the
data's evaluation settings beside the weights; it is read with ``torch.load(weights_only=True)``, and
the EMA weights are used when the run kept an EMA.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader

from vision_attn.data import IMAGE_EXTENSIONS, ImageFolder, eval_transforms, load_image, resolve_root, scan_folder
from vision_attn.errors import CheckpointError, DataError
from vision_attn.tasks.classification import build_network

__all__ = ["Classifier", "load_classifier", "load_run_checkpoint", "load_run_weights", "read_run_checkpoint", "evaluate_classifier", "predict_images",
           "accuracy_report"]


@dataclass
class Classifier:
    """A network in eval mode with its class names and evaluation pipeline."""

    model: nn.Module
    classes: list[str]
    transform: Callable[..., dict[str, Any]]
    hparams: dict[str, Any]
    data_hparams: dict[str, Any]


def load_run_checkpoint(path: str | os.PathLike) -> tuple[Any, Path]:
    """The object in a run's checkpoint (``runs/NAME/best.ckpt``, or the run folder itself: its best,
    else last), loaded with ``weights_only=True``, and the file's path."""
    path = Path(path)
    if path.is_dir():
        path = path / "best.ckpt" if (path / "best.ckpt").is_file() else path / "last.ckpt"
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint; give a run's best.ckpt or last.ckpt (runs/NAME/best.ckpt)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True), path
    except Exception as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(f"{path}: not a readable run checkpoint ({detail}); train again or pick another file") from None


def load_run_weights(model: nn.Module, state: dict[str, Any], error: str) -> nn.Module:
    """Load a run's network weights from its Lightning ``state_dict`` into ``model`` (strictly): the
    EMA's (``ema.module.*``) when the run kept one, else ``model.*``; CheckpointError ``error (why)``."""
    prefix = "ema.module." if any(k.startswith("ema.module.") for k in state) else "model."
    weights = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as e:
        raise CheckpointError(f"{error} ({str(e).splitlines()[0]})") from None
    return model


def read_run_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The checkpoint dict of a classification run (``runs/NAME/best.ckpt``, or the run folder itself),
    loaded with ``weights_only=True``."""
    ckpt, path = load_run_checkpoint(path)
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "name" not in ckpt.get("hyper_parameters", {}):
        raise CheckpointError(f"{path}: not a vision_attn classification checkpoint (no model name and state_dict); "
                              f"for a plain weights file use create_model(name, pretrained=PATH)")
    ckpt["_path"] = str(path)
    return ckpt


def load_classifier(path: str | os.PathLike) -> Classifier:
    """The network of a run's checkpoint in eval mode (EMA weights when the run kept them)."""
    ckpt = read_run_checkpoint(path)
    hp = dict(ckpt["hyper_parameters"])
    data_hp = dict(ckpt.get("datamodule_hyper_parameters") or {})
    model = build_network(hp["name"], hp.get("model_kwargs"), attention=hp.get("attention"), pretrained=None,
                          num_classes=hp["num_classes"], img_size=hp.get("img_size"))
    load_run_weights(model, ckpt["state_dict"], f"{ckpt['_path']}: the weights do not fit {hp['name']}")
    img_size = data_hp.get("img_size", hp.get("img_size") or 224)
    transform = eval_transforms(img_size, crop_pct=data_hp.get("crop_pct", 0.875),
                                mean=data_hp.get("mean", (0.485, 0.456, 0.406)),
                                std=data_hp.get("std", (0.229, 0.224, 0.225)),
                                interpolation=data_hp.get("interpolation", "bicubic"))
    classes = list(hp.get("class_names") or [str(i) for i in range(hp["num_classes"])])
    return Classifier(model.eval(), classes, transform, hp, data_hp)


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
                        num_workers: int = 0) -> dict[str, Any]:
    """Top-1, top-5 and per-class accuracy of a run's checkpoint on ``data``: the ``val/`` folder of a
    root that has one (``demo:digits`` included), else the class folders of ``data`` itself; its class
    names must be among the checkpoint's."""
    clf = load_classifier(checkpoint)
    root = resolve_root(data)
    folder = root / "val" if (root / "val").is_dir() else root
    scan = scan_folder(folder, classes=clf.classes, role="eval")
    if scan.empty_files:
        raise DataError(f"{scan.empty_files[0]}: empty image file (0 bytes); replace or delete it")
    loader = DataLoader(ImageFolder(scan.samples, clf.classes, clf.transform), batch_size=batch_size,
                        num_workers=num_workers)
    n = len(clf.classes)
    k = min(5, n)
    confusion = torch.zeros(n, n, dtype=torch.int64)
    top5 = 0
    for x, y in loader:
        logits = clf.model(x)
        pred = logits.argmax(dim=-1)
        confusion += torch.bincount(y * n + pred, minlength=n * n).reshape(n, n)
        top5 += int((logits.topk(k, dim=-1).indices == y[:, None]).any(dim=-1).sum())
    report = accuracy_report(confusion, clf.classes)
    report.update(top5=top5 / max(report["images"], 1), checkpoint=str(checkpoint), data=str(folder),
                  model=clf.hparams["name"], confusion=confusion.tolist())
    return report


def image_paths(items: Sequence[str | os.PathLike]) -> list[Path]:
    """Image files among ``items`` (folders are searched recursively), in order; DataError for a missing
    path, a file that is not an image, or no image at all."""
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.is_file() and q.suffix.lower() in IMAGE_EXTENSIONS
                          and not q.name.startswith("."))
        elif p.is_file():
            if p.suffix.lower() not in IMAGE_EXTENSIONS:
                raise DataError(f"{p}: not an image file (extension {p.suffix or 'none'}; images are "
                                f"{', '.join(sorted(IMAGE_EXTENSIONS))})")
            out.append(p)
        else:
            raise DataError(f"{p}: no such file or folder")
    if not out:
        raise DataError(f"no images found in {', '.join(map(str, items))}")
    return out


@torch.no_grad()
def predict_images(checkpoint: str | os.PathLike, images: Sequence[str | os.PathLike], *, top_k: int = 5,
                   batch_size: int = 32) -> list[dict[str, Any]]:
    """Top-k labels with probabilities for image files (folders are searched for images):
    ``[{"image": path, "top": [{"label", "index", "prob"}, ...]}, ...]``."""
    clf = load_classifier(checkpoint)
    paths = image_paths(images)
    k = max(1, min(top_k, len(clf.classes)))
    results = []
    for start in range(0, len(paths), batch_size):
        chunk = paths[start:start + batch_size]
        x = torch.stack([clf.transform(image=load_image(p))["image"] for p in chunk])  # (B, 3, H, W)
        probs = clf.model(x).float().softmax(dim=-1)
        values, indices = probs.topk(k, dim=-1)
        for p, v, i in zip(chunk, values.tolist(), indices.tolist()):
            results.append({"image": str(p), "top": [{"label": clf.classes[j], "index": j, "prob": round(pv, 6)}
                                                     for pv, j in zip(v, i)]})
    return results
