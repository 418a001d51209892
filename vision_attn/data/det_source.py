"""Open a detection data set from one string: a YOLO data YAML, a COCO folder, or ``demo:digit-boxes``.

``open_detection(spec, split)`` accepts

- ``demo:digit-boxes``: the built-in set (written to the cache once); ``fmt`` picks its COCO (default)
  or YOLO copy; ``demo:digit-masks`` the same with instance masks (open it with ``masks=True``);
  ``demo:digit-keypoints`` (``keypoints=True``: COCO or YOLO) and ``demo:digit-obb`` (``obb=True``:
  YOLO-OBB) the digits warped, with their corners or oriented boxes;
- a ``.yaml``/``.yml`` file: a YOLO data YAML;
- a folder with ``data.yaml``: YOLO; a folder with ``annotations/instances_{split}.json`` (keypoints:
  ``person_keypoints_{split}.json`` first): COCO, its
  images in ``images/{split}``, ``{split}2017`` or ``{split}``; a folder with ``coco/`` or ``yolo/``
  (the demo's layout): the one ``fmt`` names, COCO first.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Literal

from vision_attn.data.coco import CocoDetection
from vision_attn.data.demo import resolve_root
from vision_attn.data.detection import DetectionDataset
from vision_attn.data.faults import Faults
from vision_attn.data.yolo_txt import YoloDetection
from vision_attn.errors import ConfigError, DataError

__all__ = ["open_detection"]

Format = Literal["auto", "coco", "yolo"]


def _coco(root: Path, split: str, transform: Any, faults: Faults | None, masks: bool = False,
          keypoints: bool = False, obb: bool = False) -> CocoDetection:
    if obb:
        raise ConfigError(f"COCO data {root}: oriented boxes are read from YOLO-OBB labels (class x1 y1 ... x4 y4); "
                          f"give a YOLO data YAML")
    names = ("person_keypoints", "instances") if keypoints else ("instances", "person_keypoints")
    ann = next((f for f in (root / "annotations" / f"{n}_{split}.json" for n in names) if f.is_file()),
               root / "annotations" / f"{names[0]}_{split}.json")
    for images in (root / "images" / split, root / f"{split}2017", root / split):
        if images.is_dir():
            return CocoDetection(images, ann, transform=transform, faults=faults, masks=masks, keypoints=keypoints)
    raise DataError(f"COCO data {root}: no images folder for {split} (looked for images/{split}, {split}2017, "
                    f"{split})")


def open_detection(spec: str | os.PathLike, split: str = "train", *, fmt: Format = "auto",
                   transform: Callable[[DetectionDataset, int], Any] | None = None,
                   faults: Faults | None = None, masks: bool = False, keypoints: bool = False,
                   obb: bool = False) -> DetectionDataset:
    """The ``split`` (``"train"``, ``"val"``) of the data set ``spec`` (see the module docstring);
    ``faults``: the policy for bad images and labels (default: the first is an error naming it);
    ``masks``: read instance shapes too (YOLO polygons, COCO ``segmentation``); ``keypoints``: keypoint
    labels (YOLO ``kpt_shape`` rows, COCO ``keypoints``); ``obb``: oriented boxes (YOLO-OBB rows)."""
    kinds = {"masks": masks, "keypoints": keypoints, "obb": obb}
    if fmt not in ("auto", "coco", "yolo"):
        raise ConfigError(f"format={fmt!r}: choose auto, coco or yolo")
    path = resolve_root(spec)
    if path.is_file() and path.suffix in (".yaml", ".yml"):
        if fmt == "coco":
            raise ConfigError(f"{path} is a YOLO data YAML but format=coco was asked for")
        return YoloDetection(path, split, transform=transform, faults=faults, **kinds)
    if not path.is_dir():
        raise DataError(f"detection data {spec}: no such file or folder; give a YOLO data YAML, a COCO folder "
                        f"(annotations/instances_{split}.json + images/{split}/) or demo:digit-boxes")
    has_yolo = (path / "data.yaml").is_file()
    has_coco = any((path / "annotations" / f"{n}_{split}.json").is_file() for n in ("instances", "person_keypoints"))
    if has_yolo and fmt != "coco":
        return YoloDetection(path / "data.yaml", split, transform=transform, faults=faults, **kinds)
    if has_coco and fmt != "yolo":
        return _coco(path, split, transform, faults, **kinds)
    order = ["yolo", "coco"] if fmt == "yolo" else ["coco", "yolo"]
    for sub in order:
        if (path / sub).is_dir():
            return open_detection(path / sub, split, fmt=fmt, transform=transform, faults=faults, **kinds)
    raise DataError(f"detection data {path}: found neither data.yaml (YOLO) nor annotations/instances_{split}.json "
                    f"(COCO){' for format=' + fmt if fmt != 'auto' else ''}")
