"""Run checkpoints as training writes them, built from random weights in a second (no training)."""
from __future__ import annotations

from pathlib import Path

import torch

import vision_attn
from vision_attn.io.atomic import save_torch
from vision_attn.io.resources import resolve_path
from vision_attn.models.yolo import build_detector
from vision_attn.tasks.detect.run import detector_checkpoint

VIT_KW = {"img_size": 16, "patch_size": 4, "embed_dim": 64, "depth": 2, "num_heads": 2, "num_classes": 10}


def classifier_checkpoint(path: Path, *, seed: int = 0) -> Path:
    """A ``vit_tiny_patch16_224`` run at 16 px with 10 classes (model name, arguments, classes, data
    settings, weights)."""
    torch.manual_seed(seed)
    model = vision_attn.create_model("vit_tiny_patch16_224", **VIT_KW)
    kwargs = {k: v for k, v in VIT_KW.items() if k not in ("img_size", "num_classes")}
    return save_torch({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                       "hyper_parameters": {"name": "vit_tiny_patch16_224", "model_kwargs": kwargs, "num_classes": 10,
                                            "img_size": 16, "class_names": [str(i) for i in range(10)]},
                       "datamodule_hyper_parameters": {"img_size": 16, "crop_pct": 1.0}}, path)


def yolo_checkpoint(path: Path, *, yaml: str = "yolov8n.yaml", img_size: int = 96, names=("a", "b", "c"),
                    seed: int = 0) -> Path:
    """A detection run of ``yaml`` (scale n) with random weights, trained at ``img_size``."""
    torch.manual_seed(seed)
    text = resolve_path(yaml, kinds=("model",)).read_text()
    model = build_detector(text, scale="n", num_classes=len(names))
    return save_torch(detector_checkpoint(text, model.state_dict(), names=list(names), img_size=img_size, scale="n"),
                      path)
