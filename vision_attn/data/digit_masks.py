"""``demo:digit-masks``: ``demo:digit-boxes``' images and digits with each digit's own shape as its mask.

The images, digits and order are those of :mod:`vision_attn.data.digit_boxes` for the same
configuration (the same generator, pixel for pixel). A digit's mask is the outline of its ink (the
pasted scan's alpha >= ``INK_THRESHOLD``, the pixels its box is tight around), traced with
``cv2.findContours`` as polygons through the centres of the boundary pixels (x + 0.5, y + 0.5), so
that filling a polygon (ultralytics' ``polygon2mask``, :func:`vision_attn.data.masks.fill_polygons`)
gives back exactly its ink pixels. Holes (the inside of a 0, 6, 8, 9) are filled: neither layout's
polygons can carry a hole. An ink of several pieces (about 1 digit in 300) is several polygons in
COCO and its largest piece in YOLO (a YOLO line holds one polygon). Written in both layouts::

    ROOT/coco/images/{train,val}/000001.png
    ROOT/coco/annotations/instances_{train,val}.json   (bbox: the ink box as digit-boxes';
                                                        segmentation: the polygons)
    ROOT/yolo/images/{train,val}/000001.png
    ROOT/yolo/labels/{train,val}/000001.txt            ("class x1 y1 x2 y2 ...", normalised)
    ROOT/yolo/data.yaml

(YOLO readers take a polygon's box from its points: half a pixel inside the ink box on each side.)
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

import cv2
import numpy as np

from vision_attn.data.digit_boxes import DEMO_CONFIG, DIGIT_NAMES, DigitBoxesConfig, generate_digit_boxes
from vision_attn.data.masks import fill_polygons

__all__ = ["ink_polygons", "write_digit_masks"]


def ink_polygons(ink: np.ndarray, x0: int, y0: int) -> list[np.ndarray]:
    """The outer outlines (k, 2) float32 x, y in canvas pixels of an ink patch (ph, pw) bool placed at
    (x0, y0), largest area first; outlines of fewer than 3 points (a piece one pixel wide) are left out,
    and an ink with none is its box's rectangle."""
    contours, _ = cv2.findContours(ink.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    polys = [c.reshape(-1, 2).astype(np.float32) for c in contours if len(c) >= 3]
    if not polys:
        rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
        polys = [np.array([[cols[0], rows[0]], [cols[-1], rows[0]], [cols[-1], rows[-1]], [cols[0], rows[-1]]],
                          np.float32)]
    polys.sort(key=lambda p: -abs(cv2.contourArea(p)) - len(p) * 1e-6)
    return [p + np.array([x0 + 0.5, y0 + 0.5], np.float32) for p in polys]


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def write_digit_masks(root: str | Path, cfg: DigitBoxesConfig = DEMO_CONFIG, *,
                      final_root: str | Path | None = None) -> Path:
    """Write the set under ``root`` in COCO and YOLO layouts (see the module docstring); return ``root``.
    ``final_root``: where ``root`` will be renamed to (``yolo/data.yaml``'s absolute ``path``)."""
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
            for box, label, (ink, x0, y0) in zip(item.boxes.tolist(), item.labels.tolist(), item.inks):
                polys = ink_polygons(ink, x0, y0)
                bx0, by0, bx1, by1 = box
                annotations.append({"id": len(annotations) + 1, "image_id": i, "category_id": label + 1,
                                    "bbox": [bx0, by0, bx1 - bx0, by1 - by0], "area": int(fill_polygons(polys, h, w).sum()),
                                    "iscrowd": 0,
                                    "segmentation": [[round(float(v), 2) for v in p.reshape(-1)] for p in polys]})
                norm = polys[0] / np.array([w, h], np.float32)
                lines.append(f"{label} " + " ".join(f"{v:.6f}" for v in norm.reshape(-1)) + "\n")
            (yolo_labels / f"{i:06d}.txt").write_text("".join(lines))
        doc = {"info": {"description": "vision_attn demo:digit-masks", "config": asdict(cfg)},
               "images": images, "annotations": annotations, "categories": categories}
        (root / "coco" / "annotations" / f"instances_{split}.json").write_text(json.dumps(doc))
    names = "\n".join(f"  {i}: '{n}'" for i, n in enumerate(DIGIT_NAMES))
    (root / "yolo" / "data.yaml").write_text(
        f"# vision_attn demo:digit-masks, {json.dumps(asdict(cfg))}\n"
        f"path: {(final / 'yolo').resolve()}\ntrain: images/train\nval: images/val\nnames:\n{names}\n")
    return root
