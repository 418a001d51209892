"""``demo:digit-keypoints`` and ``demo:digit-obb``: the scans of ``demo:digit-boxes`` warped, with the
corners of each digit as keypoints or as its oriented box.

Canvases, backgrounds, colours, digit sizes and the train/val split of the scans are those of
:mod:`vision_attn.data.digit_boxes` (same :class:`~vision_attn.data.digit_boxes.DigitBoxesConfig`,
another random stream). A digit's *ink box* is the tight box of its ink in the upright scan
(alpha >= ``INK_THRESHOLD``); its four corners, top-left, top-right, bottom-right, bottom-left of the
upright digit, go through the digit's warp with the image:

- ``keypoints``: a perspective warp (a rotation of up to +-30 degrees and each patch corner moved by up to
  15% of the patch size); the corners are the keypoints (``kpt_shape [4, 3]``, all visible: v = 2),
  ``flip_idx [1, 0, 3, 2]`` (a mirrored digit's top-left is the original's top-right), the box their
  enclosing box;
- ``obb``: a rotation by an angle in [0, 180) degrees; the corners are the oriented box, the box their
  enclosing box.

Pixels are in the corner convention of boxes (pixel ``i`` spans [i, i + 1)); the scan is warped with
``cv2.warpPerspective`` by the same map, shifted by half a pixel into OpenCV's pixel centres. A digit is
placed only where its corners are inside the canvas and its box overlaps earlier ones by IoU <=
``max_iou``. Written as::

    ROOT/coco/images/{train,val}/000001.png                  (digit-keypoints only)
    ROOT/coco/annotations/person_keypoints_{train,val}.json  (keypoints [x, y, 2] x 4, num_keypoints 4;
                                                              categories' keypoints and skeleton)
    ROOT/yolo/images/{train,val}/000001.png
    ROOT/yolo/labels/{train,val}/000001.txt   (keypoints: "class cx cy w h x1 y1 2 ... x4 y4 2";
                                               obb: "class x1 y1 x2 y2 x3 y3 x4 y4"; normalised)
    ROOT/yolo/data.yaml                       (keypoints: kpt_shape, flip_idx, kpt_names)

The COCO ``area`` of an instance is 0.53 x its box's area, the OKS scale that ultralytics gives YOLO
labels, so both layouts evaluate alike.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Literal

import cv2
import numpy as np

from vision_attn.data.digit_boxes import (
    DEMO_CONFIG,
    DIGIT_NAMES,
    INK_THRESHOLD,
    TRAIN_SCANS,
    DigitBoxesConfig,
    _iou,
    _link,
    blank_canvas,
    digit_patches,
    digit_scans,
)
from vision_attn.errors import ConfigError

__all__ = ["WarpedDigits", "generate_warped_digits", "write_digit_keypoints", "write_digit_obb", "CORNER_NAMES",
           "CORNER_FLIP_IDX", "CORNER_SKELETON"]

Kind = Literal["keypoints", "obb"]
CORNER_NAMES = ("top_left", "top_right", "bottom_right", "bottom_left")
CORNER_FLIP_IDX = (1, 0, 3, 2)
CORNER_SKELETON = ((0, 1), (1, 2), (2, 3), (3, 0))
OKS_AREA = 0.53  # share of the box area ultralytics takes as an instance's area for OKS


@dataclass
class WarpedDigits:
    """One image: (H, W, 3) uint8 RGB, boxes (n, 4) float32 xyxy, digits (n,) int64, each digit's ink-box
    corners (n, 4, 2) float32 in canvas pixels (top-left, top-right, bottom-right, bottom-left) and its
    warped ink (H, W) bool (warped alpha >= ``INK_THRESHOLD``)."""

    image: np.ndarray
    boxes: np.ndarray
    labels: np.ndarray
    corners: np.ndarray
    inks: list[np.ndarray] = field(default_factory=list)


def _apply(m: np.ndarray, pts: np.ndarray) -> np.ndarray:
    q = np.concatenate([pts, np.ones((len(pts), 1))], axis=1) @ m.T
    return q[:, :2] / q[:, 2:3]


def _warp(rng: np.random.Generator, kind: Kind, pw: int, ph: int) -> np.ndarray:
    """A 3x3 map of patch pixels (corner convention) about the patch centre, moved to the origin."""
    c = np.array([pw / 2, ph / 2])
    a = np.deg2rad(rng.uniform(0, 180) if kind == "obb" else rng.uniform(-30, 30))
    src = np.array([[0, 0], [pw, 0], [pw, ph], [0, ph]], np.float64)
    dst = src - c
    if kind == "keypoints":
        dst = dst + rng.uniform(-0.15, 0.15, size=(4, 2)) * [pw, ph]
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    dst = dst @ rot.T
    dst -= dst.min(axis=0)
    return cv2.getPerspectiveTransform(src.astype(np.float32), dst.astype(np.float32)).astype(np.float64)


def _draw(rng: np.random.Generator, scans: np.ndarray, digits: np.ndarray, cfg: DigitBoxesConfig,
          kind: Kind) -> WarpedDigits:
    canvas, n = blank_canvas(rng, cfg)
    h, w = canvas.shape[:2]
    boxes: list[np.ndarray] = []
    labels: list[int] = []
    corners: list[np.ndarray] = []
    inks: list[np.ndarray] = []
    half = np.array([[1, 0, 0.5], [0, 1, 0.5], [0, 0, 1]])  # pixel centres -> corners
    for k, alpha, ink in digit_patches(rng, scans, cfg, w, n):
        ph, pw = alpha.shape
        rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
        x0, y0, x1, y1 = cols[0], rows[0], cols[-1] + 1, rows[-1] + 1
        ink_corners = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)
        m = _warp(rng, kind, pw, ph)
        local = _apply(m, ink_corners)
        lo, hi = local.min(axis=0), local.max(axis=0)
        if hi[0] - lo[0] > w - 2 or hi[1] - lo[1] > h - 2:
            continue
        for _ in range(30):
            dx = rng.uniform(1 - lo[0], w - 1 - hi[0])
            dy = rng.uniform(1 - lo[1], h - 1 - hi[1])
            box = np.array([lo[0] + dx, lo[1] + dy, hi[0] + dx, hi[1] + dy], np.float32)
            if not boxes or _iou(box, np.stack(boxes)).max() <= cfg.max_iou:
                break
        else:
            continue
        full = np.array([[1, 0, dx], [0, 1, dy], [0, 0, 1]]) @ m
        in_centres = np.linalg.inv(half) @ full @ half
        a = cv2.warpPerspective(alpha, in_centres, (w, h), flags=cv2.INTER_LINEAR, borderValue=0.0)[:, :, None]
        colour = rng.uniform(150, 255, size=3)
        canvas = canvas * (1 - a) + colour * a
        boxes.append(box)
        labels.append(int(digits[k]))
        corners.append(_apply(full, ink_corners).astype(np.float32))
        inks.append(a[:, :, 0] >= INK_THRESHOLD)
    image = np.clip(np.rint(canvas), 0, 255).astype(np.uint8)
    return WarpedDigits(image, np.array(boxes, np.float32).reshape(-1, 4), np.array(labels, np.int64),
                        np.array(corners, np.float32).reshape(-1, 4, 2), inks)


def generate_warped_digits(split: str, kind: Kind, cfg: DigitBoxesConfig = DEMO_CONFIG) -> Iterator[WarpedDigits]:
    """The images of ``split`` (``"train"``, ``"val"``) of the ``kind`` set, in order, from ``cfg.seed``."""
    cfg.check()
    if split not in ("train", "val"):
        raise ConfigError(f"split={split!r}: choose 'train' or 'val'")
    if kind not in ("keypoints", "obb"):
        raise ConfigError(f"kind={kind!r}: choose 'keypoints' or 'obb'")
    scans, digits = digit_scans()
    part = slice(0, TRAIN_SCANS) if split == "train" else slice(TRAIN_SCANS, None)
    rng = np.random.default_rng([cfg.seed, 0 if split == "train" else 1, 2 if kind == "keypoints" else 3])
    for _ in range(cfg.n_train if split == "train" else cfg.n_val):
        yield _draw(rng, scans[part], digits[part], cfg, kind)


def _data_yaml(root: Path, final: Path, cfg: DigitBoxesConfig, kind: Kind) -> None:
    names = "\n".join(f"  {i}: '{n}'" for i, n in enumerate(DIGIT_NAMES))
    extra = ""
    if kind == "keypoints":
        corner_list = "[" + ", ".join(CORNER_NAMES) + "]"
        extra = (f"kpt_shape: [4, 3]\nflip_idx: {list(CORNER_FLIP_IDX)}\n"
                 f"skeleton: {[list(p) for p in CORNER_SKELETON]}\nkpt_names:\n"
                 + "".join(f"  {i}: {corner_list}\n" for i in range(len(DIGIT_NAMES))))
    (root / "yolo" / "data.yaml").write_text(
        f"# vision_attn demo:digit-{kind}, {json.dumps(asdict(cfg))}\n"
        f"path: {(final / 'yolo').resolve()}\ntrain: images/train\nval: images/val\n{extra}names:\n{names}\n")


def _write(root: str | Path, kind: Kind, cfg: DigitBoxesConfig, final_root: str | Path | None) -> Path:
    root = Path(root)
    final = Path(final_root) if final_root is not None else root
    categories = [{"id": i + 1, "name": name, "supercategory": "digit", "keypoints": list(CORNER_NAMES),
                   "skeleton": [[a + 1, b + 1] for a, b in CORNER_SKELETON]} for i, name in enumerate(DIGIT_NAMES)]
    coco = kind == "keypoints"
    for split in ("train", "val"):
        coco_images, yolo_images = root / "coco" / "images" / split, root / "yolo" / "images" / split
        yolo_labels = root / "yolo" / "labels" / split
        for d in (yolo_images, yolo_labels, *((coco_images, root / "coco" / "annotations") if coco else ())):
            d.mkdir(parents=True, exist_ok=True)
        images, annotations = [], []
        for i, item in enumerate(generate_warped_digits(split, kind, cfg), start=1):
            name = f"{i:06d}.png"
            h, w = item.image.shape[:2]
            cv2.imwrite(str(yolo_images / name), cv2.cvtColor(item.image, cv2.COLOR_RGB2BGR))
            if coco:
                _link(yolo_images / name, coco_images / name)
            images.append({"id": i, "file_name": name, "height": h, "width": w})
            lines = []
            size = np.array([w, h], np.float64)
            for box, label, c in zip(item.boxes.tolist(), item.labels.tolist(), item.corners.astype(np.float64)):
                x0, y0, x1, y1 = box
                norm = c / size
                if kind == "obb":
                    lines.append(f"{label} " + " ".join(f"{v:.6f}" for v in norm.reshape(-1)) + "\n")
                    continue
                kpts = " ".join(f"{x:.6f} {y:.6f} 2" for x, y in norm)
                lines.append(f"{label} {(x0 + x1) / 2 / w:.6f} {(y0 + y1) / 2 / h:.6f} {(x1 - x0) / w:.6f} "
                             f"{(y1 - y0) / h:.6f} {kpts}\n")
                annotations.append({
                    "id": len(annotations) + 1, "image_id": i, "category_id": label + 1,
                    "bbox": [x0, y0, x1 - x0, y1 - y0], "area": OKS_AREA * (x1 - x0) * (y1 - y0), "iscrowd": 0,
                    "num_keypoints": 4,
                    "keypoints": [v for x, y in c.tolist() for v in (round(x, 3), round(y, 3), 2)]})
            (yolo_labels / f"{i:06d}.txt").write_text("".join(lines))
        if coco:
            doc = {"info": {"description": "vision_attn demo:digit-keypoints", "config": asdict(cfg)},
                   "images": images, "annotations": annotations, "categories": categories}
            (root / "coco" / "annotations" / f"person_keypoints_{split}.json").write_text(json.dumps(doc))
    _data_yaml(root, final, cfg, kind)
    return root


def write_digit_keypoints(root: str | Path, cfg: DigitBoxesConfig = DEMO_CONFIG, *,
                          final_root: str | Path | None = None) -> Path:
    """Write ``demo:digit-keypoints`` under ``root`` in COCO and YOLO layouts; return ``root``.
    ``final_root``: where ``root`` will be renamed to (``yolo/data.yaml``'s absolute ``path``)."""
    return _write(root, "keypoints", cfg, final_root)


def write_digit_obb(root: str | Path, cfg: DigitBoxesConfig = DEMO_CONFIG, *,
                    final_root: str | Path | None = None) -> Path:
    """Write ``demo:digit-obb`` under ``root`` in the YOLO-OBB layout; return ``root``."""
    return _write(root, "obb", cfg, final_root)
