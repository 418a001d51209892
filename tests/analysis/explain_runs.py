"""Run folders for the explain and report tests, written in a run's checkpoint layout without training
(the maps and the report read what a run records; their weights only have to be the run's)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

import vision_attn
from vision_attn.io.atomic import save_torch
from vision_attn.io.resources import resolve_path
from vision_attn.tasks.detect.run import detector_checkpoint

CLASSES = ["a", "b", "c"]
VIT = {"patch_size": 8, "depth": 2, "embed_dim": 32, "num_heads": 2}
SWIN = {"patch_size": 4, "window_size": 2, "embed_dim": 16, "depths": (1, 1), "num_heads": (1, 2)}


def classifier_run(folder: Path, name: str, kwargs: dict, img_size: int = 32, seed: int = 0) -> Path:
    """``folder/best.ckpt`` of a ``create_model(name, **kwargs)`` classifier of three classes."""
    torch.manual_seed(seed)
    model = vision_attn.create_model(name, num_classes=len(CLASSES), img_size=img_size, **kwargs)
    ckpt = {"task": "cls", "hyper_parameters": {"name": name, "model_kwargs": kwargs, "num_classes": len(CLASSES),
                                                "img_size": img_size, "class_names": CLASSES},
            "datamodule_hyper_parameters": {"img_size": img_size},
            "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}
    save_torch(ckpt, folder / "best.ckpt", mkdir=True)
    return folder


def detector_run(folder: Path, yaml: str = "yolov8n.yaml", img_size: int = 64, class_bias: float | None = None,
                 seed: int = 0) -> Path:
    """``folder/best.ckpt`` of a detector of three classes; ``class_bias`` sets the class branch's last
    biases (so that an untrained detector finds boxes)."""
    torch.manual_seed(seed)
    text = Path(resolve_path(yaml, kinds=("model",))).read_text()
    ckpt = detector_checkpoint(text, {}, names=CLASSES, img_size=img_size, scale="n")
    if class_bias is not None:
        for k, v in ckpt["state_dict"].items():
            if ".cv3." in k and k.endswith(".bias") and v.numel() == len(CLASSES):
                v.fill_(class_bias)
    save_torch(ckpt, folder / "best.ckpt", mkdir=True)
    return folder


def write_images(folder: Path, n: int = 2, size: tuple[int, int] = (40, 48)) -> list[Path]:
    """``n`` RGB images with a bright square each, and ``bad.png`` (not an image)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        img = rng.integers(0, 80, (*size, 3), dtype=np.uint8)
        img[8 + 4 * i:24 + 4 * i, 10:26] = 230
        Image.fromarray(img).save(folder / f"img{i}.png")
        paths.append(folder / f"img{i}.png")
    (folder / "bad.png").write_bytes(b"not an image")
    return paths
