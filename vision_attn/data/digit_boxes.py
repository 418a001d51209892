"""``demo:digit-boxes``: a detection set drawn from scikit-learn's real handwritten digits.

Each image is a canvas (160x160, 120x160 or 160x120 pixels, a random dark background colour with
Gaussian noise) holding 0 to 6 digits. A digit is one of ``load_digits``' 8x8 scans, upsampled with
Lanczos to a random height of 16-48 px (width 0.8-1.2 times that), drawn in a random bright colour
with the scan as its alpha. Its box is the tight box of its ink (alpha >= ``INK_THRESHOLD``), not the
whole patch; a new digit is placed only where its ink box has IoU <= ``max_iou`` with every earlier
one (up to 30 tries, else it is left out). About 5% of the images are empty (negatives).

The scans are split by index before anything is drawn: train images use scans 0..1437, val images
scans 1438..1796 only, so val digits are handwriting the model has never seen. Everything follows from
``seed``: the same configuration gives the same pixels and boxes. The default size, 2,000 train and
400 val images, is chosen so a YOLOv8n at 160 px trains an epoch in about a minute on 2 CPU cores.

The set is written in both layouts that :mod:`vision_attn.data.coco` and :mod:`vision_attn.data.yolo_txt`
read, sharing the PNG files (hard links, else copies)::

    ROOT/coco/images/{train,val}/000001.png
    ROOT/coco/annotations/instances_{train,val}.json   (category ids 1..10 named "0".."9")
    ROOT/yolo/images/{train,val}/000001.png
    ROOT/yolo/labels/{train,val}/000001.txt            ("class cx cy w h", normalised; empty: negative)
    ROOT/yolo/data.yaml                                (path, train, val, names)
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import cv2
import numpy as np

from vision_attn.errors import ConfigError

__all__ = ["DigitBoxesConfig", "DigitImage", "generate_digit_boxes", "write_digit_boxes", "digit_scans",
           "blank_canvas", "digit_patches",
           "INK_THRESHOLD", "DIGIT_NAMES", "DEMO_CONFIG"]

INK_THRESHOLD = 0.25  # alpha at or above which a pixel counts as ink (box edges)
DIGIT_NAMES = [str(i) for i in range(10)]
CANVAS_SIZES = ((160, 160), (120, 160), (160, 120))  # (height, width)
TRAIN_SCANS = 1438  # scans [0, 1438) draw train images, [1438, 1797) val images


@dataclass(frozen=True)
class DigitBoxesConfig:
    """How many images, how many digits per image, their sizes and overlap, and the seed."""

    n_train: int = 2000
    n_val: int = 400
    max_digits: int = 6
    min_size: int = 16
    max_size: int = 48
    empty_fraction: float = 0.05
    max_iou: float = 0.1
    noise: float = 8.0  # standard deviation of the background noise, in grey levels
    seed: int = 0

    def check(self) -> None:
        """Raise :class:`ConfigError` for values the generator cannot honour."""
        if self.n_train < 1 or self.n_val < 1:
            raise ConfigError(f"n_train={self.n_train}, n_val={self.n_val}: give at least one image per split")
        if not 1 <= self.max_digits <= 20:
            raise ConfigError(f"max_digits={self.max_digits}: give 1..20")
        if not 8 <= self.min_size <= self.max_size <= 100:
            raise ConfigError(f"min_size={self.min_size}, max_size={self.max_size}: give 8 <= min <= max <= 100 "
                              f"(canvases are at most 160 px)")
        if not 0 <= self.empty_fraction < 1:
            raise ConfigError(f"empty_fraction={self.empty_fraction}: give a fraction in [0, 1)")
        if not 0 <= self.max_iou <= 1:
            raise ConfigError(f"max_iou={self.max_iou}: give a value in [0, 1]")


@dataclass
class DigitImage:
    """One generated image: (H, W, 3) uint8 RGB pixels, ink boxes (n, 4) float32 xyxy in pixels and
    class indices (n,) int64 (the digit); ``inks``: each digit's ink (ph, pw) bool (alpha >=
    ``INK_THRESHOLD``) and the canvas position (x0, y0) of its patch (what ``demo:digit-masks`` outlines)."""

    image: np.ndarray
    boxes: np.ndarray
    labels: np.ndarray
    inks: list[tuple[np.ndarray, int, int]] = field(default_factory=list)


DEMO_CONFIG = DigitBoxesConfig()  # what ``demo:digit-boxes`` is made of (cached as digit-boxes-v1)


def digit_scans() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 digit scans as (N, 8, 8) float32 alpha in [0, 1] and their digits (N,)."""
    from sklearn.datasets import load_digits  # slow to import

    d = load_digits()
    return (d.images / 16.0).astype(np.float32), d.target.astype(np.int64)


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """IoU of one xyxy box (4,) with each of ``others`` (n, 4)."""
    if len(others) == 0:
        return np.zeros(0)
    lt = np.maximum(box[:2], others[:, :2])
    rb = np.minimum(box[2:], others[:, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=1)
    area = np.prod(box[2:] - box[:2])
    areas = np.prod(others[:, 2:] - others[:, :2], axis=1)
    return inter / (area + areas - inter)


def blank_canvas(rng: np.random.Generator, cfg: DigitBoxesConfig) -> tuple[np.ndarray, int]:
    """A canvas (h, w, 3) float64 (grey noise on a random dark colour) and how many digits to try on it."""
    h, w = CANVAS_SIZES[rng.integers(len(CANVAS_SIZES))]
    background = rng.uniform(0, 90, size=3)
    canvas = background + rng.normal(0.0, cfg.noise, size=(h, w, 1))  # (h, w, 3): grey noise on a colour
    n = 0 if rng.random() < cfg.empty_fraction else int(rng.integers(1, cfg.max_digits + 1))
    return canvas, n


def digit_patches(rng: np.random.Generator, scans: np.ndarray, cfg: DigitBoxesConfig, width: int,
                  n: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """``n`` tries of a random scan: its index, its alpha (ph, pw) float32 at a random size (at most
    ``width`` wide) and its ink (alpha >= ``INK_THRESHOLD``); a try without ink is left out. Drawn from
    ``rng`` as each is taken."""
    for _ in range(n):
        k = int(rng.integers(len(scans)))
        ph = int(rng.integers(cfg.min_size, cfg.max_size + 1))
        pw = int(np.clip(round(ph * rng.uniform(0.8, 1.2)), 8, width))
        alpha = np.clip(cv2.resize(scans[k], (pw, ph), interpolation=cv2.INTER_LANCZOS4), 0.0, 1.0)
        ink = alpha >= INK_THRESHOLD
        if ink.any():
            yield k, alpha, ink


def _draw(rng: np.random.Generator, scans: np.ndarray, digits: np.ndarray, cfg: DigitBoxesConfig) -> DigitImage:
    canvas, n = blank_canvas(rng, cfg)
    h, w = canvas.shape[:2]
    boxes: list[np.ndarray] = []
    labels: list[int] = []
    inks: list[tuple[np.ndarray, int, int]] = []
    for k, alpha, ink in digit_patches(rng, scans, cfg, w, n):
        ph, pw = alpha.shape
        rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
        ink_box = np.array([cols[0], rows[0], cols[-1] + 1, rows[-1] + 1], dtype=np.float32)
        for _ in range(30):
            y0, x0 = int(rng.integers(0, h - ph + 1)), int(rng.integers(0, w - pw + 1))
            box = ink_box + np.array([x0, y0, x0, y0], dtype=np.float32)
            if not boxes or _iou(box, np.stack(boxes)).max() <= cfg.max_iou:
                break
        else:
            continue
        colour = rng.uniform(150, 255, size=3)
        a = alpha[:, :, None]
        patch = canvas[y0:y0 + ph, x0:x0 + pw]
        canvas[y0:y0 + ph, x0:x0 + pw] = patch * (1 - a) + colour * a
        boxes.append(box)
        labels.append(int(digits[k]))
        inks.append((ink, x0, y0))
    image = np.clip(np.rint(canvas), 0, 255).astype(np.uint8)
    return DigitImage(image, np.array(boxes, dtype=np.float32).reshape(-1, 4), np.array(labels, dtype=np.int64),
                      inks)


def generate_digit_boxes(split: str, cfg: DigitBoxesConfig = DigitBoxesConfig()) -> Iterator[DigitImage]:
    """The images of ``split`` (``"train"`` or ``"val"``), in order, deterministically from ``cfg.seed``."""
    cfg.check()
    if split not in ("train", "val"):
        raise ConfigError(f"split={split!r}: choose 'train' or 'val'")
    scans, digits = digit_scans()
    part = slice(0, TRAIN_SCANS) if split == "train" else slice(TRAIN_SCANS, None)
    rng = np.random.default_rng([cfg.seed, 0 if split == "train" else 1])
    for _ in range(cfg.n_train if split == "train" else cfg.n_val):
        yield _draw(rng, scans[part], digits[part], cfg)


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def write_digit_boxes(root: str | Path, cfg: DigitBoxesConfig = DigitBoxesConfig(), *,
                      final_root: str | Path | None = None) -> Path:
    """Write the set under ``root`` in COCO and YOLO layouts (see the module docstring); return ``root``.

    ``final_root``: where ``root`` will be renamed to (the demo cache writes to a temporary folder), so
    that ``yolo/data.yaml``'s absolute ``path`` is right for ultralytics too."""
    root = Path(root)
    final = Path(final_root) if final_root is not None else root
    categories = [{"id": i + 1, "name": name, "supercategory": "digit"} for i, name in enumerate(DIGIT_NAMES)]
    for split in ("train", "val"):
        coco_images, yolo_images = root / "coco" / "images" / split, root / "yolo" / "images" / split
        yolo_labels = root / "yolo" / "labels" / split
        for d in (coco_images, yolo_images, yolo_labels, root / "coco" / "annotations"):
            d.mkdir(parents=True, exist_ok=True)
        images, annotations = [], []
        for i, item in enumerate(generate_digit_boxes(split, cfg), start=1):
            name = f"{i:06d}.png"
            h, w = item.image.shape[:2]
            cv2.imwrite(str(coco_images / name), cv2.cvtColor(item.image, cv2.COLOR_RGB2BGR))
            _link(coco_images / name, yolo_images / name)
            images.append({"id": i, "file_name": name, "height": h, "width": w})
            lines = []
            for box, label in zip(item.boxes.tolist(), item.labels.tolist()):
                x0, y0, x1, y1 = box
                annotations.append({"id": len(annotations) + 1, "image_id": i, "category_id": label + 1,
                                    "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0),
                                    "iscrowd": 0})
                lines.append(f"{label} {(x0 + x1) / 2 / w:.6f} {(y0 + y1) / 2 / h:.6f} "
                             f"{(x1 - x0) / w:.6f} {(y1 - y0) / h:.6f}\n")
            (yolo_labels / f"{i:06d}.txt").write_text("".join(lines))
        doc = {"info": {"description": "vision_attn demo:digit-boxes", "config": asdict(cfg)},
               "images": images, "annotations": annotations, "categories": categories}
        (root / "coco" / "annotations" / f"instances_{split}.json").write_text(json.dumps(doc))
    names = "\n".join(f"  {i}: '{n}'" for i, n in enumerate(DIGIT_NAMES))
    (root / "yolo" / "data.yaml").write_text(
        f"# vision_attn demo:digit-boxes, {json.dumps(asdict(cfg))}\n"
        f"path: {(final / 'yolo').resolve()}\ntrain: images/train\nval: images/val\nnames:\n{names}\n")
    return root
