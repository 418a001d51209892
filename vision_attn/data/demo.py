"""Built-in demo data: real images that installed packages ship, written once as ImageNet-style folders.

``demo:digits``: scikit-learn's ``load_digits`` (1,797 handwritten digits, 8x8 grey scans with 17
levels, 10 classes) as PNG files in ``CACHE/digits-v1/{train,val}/{0..9}/``, split 80/20 per class
with a fixed seed (1,438 train, 359 val). ``demo:faces``: scikit-image's ``lfw_subset`` (100 faces
and 100 non-faces, 25x25 grey) in ``CACHE/faces-v1/``, when scikit-image is installed.
``demo:digit-boxes``: a detection set of those digits on canvases, in COCO json and YOLO txt layouts
under ``CACHE/digit-boxes-v1/{coco,yolo}/`` (see :mod:`vision_attn.data.digit_boxes`);
``demo:digit-masks``: the same images and digits with each digit's ink outline as its instance mask
(COCO ``segmentation`` polygons, YOLO polygon labels) under ``CACHE/digit-masks-v1/{coco,yolo}/`` (see
:mod:`vision_attn.data.digit_masks`); ``demo:digit-keypoints`` (each digit warped, its four corners as
keypoints: COCO keypoints json and YOLO pose labels) and ``demo:digit-obb`` (each digit rotated, its
oriented box: YOLO-OBB labels) under ``CACHE/digit-keypoints-v1/`` and ``CACHE/digit-obb-v1/`` (see
:mod:`vision_attn.data.digit_warps`). A demo then
goes through the same code as a user's folder. The cache is ``$VISION_ATTN_CACHE``, else
``$XDG_CACHE_HOME/vision_attn``, else ``~/.cache/vision_attn``; a folder is written under a temporary
name and renamed when complete, so concurrent processes (DDP ranks) never see half of it.
"""
from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from vision_attn.data import digit_boxes, digit_masks, digit_warps
from vision_attn.data.folder import split_samples
from vision_attn.errors import ConfigError
from vision_attn.io.cache import cache_dir

__all__ = ["DEMO_PREFIX", "DEMO_DATASETS", "cache_dir", "is_demo", "resolve_root", "materialise"]


DEMO_PREFIX = "demo:"
SPLIT_SEED = 0
VAL_FRACTION = 0.2


def _digits() -> tuple[np.ndarray, np.ndarray, list[str]]:
    from sklearn.datasets import load_digits  # scikit-learn is slow to import

    d = load_digits()
    images = np.rint(d.images * (255.0 / 16.0)).astype(np.uint8)  # (1797, 8, 8), 0..16 -> 0..255
    return images, d.target.astype(np.int64), [str(i) for i in range(10)]


def _faces() -> tuple[np.ndarray, np.ndarray, list[str]]:
    try:
        from skimage.data import lfw_subset
    except ImportError:
        raise ConfigError("demo:faces needs scikit-image (pip install scikit-image); demo:digits needs only "
                          "scikit-learn") from None
    faces = lfw_subset()  # (200, 25, 25) float in [0, 1]: 100 faces, then 100 non-faces
    images = np.rint(np.clip(faces, 0, 1) * 255).astype(np.uint8)
    labels = np.array([0] * 100 + [1] * 100, dtype=np.int64)
    return images, labels, ["face", "non_face"]


def _digit_boxes(tmp: Path, final: Path) -> None:
    digit_boxes.write_digit_boxes(tmp, digit_boxes.DEMO_CONFIG, final_root=final)  # read when called


def _digit_masks(tmp: Path, final: Path) -> None:
    digit_masks.write_digit_masks(tmp, digit_boxes.DEMO_CONFIG, final_root=final)


def _digit_keypoints(tmp: Path, final: Path) -> None:
    digit_warps.write_digit_keypoints(tmp, digit_boxes.DEMO_CONFIG, final_root=final)


def _digit_obb(tmp: Path, final: Path) -> None:
    digit_warps.write_digit_obb(tmp, digit_boxes.DEMO_CONFIG, final_root=final)


def _class_folders(load: Callable[[], tuple[np.ndarray, np.ndarray, list[str]]]) -> Callable[[Path, Path], None]:
    return lambda tmp, final: _write(tmp, *load())


# name -> (cache folder, writer(temporary folder, final folder)); the writer fills the temporary folder
DEMO_DATASETS: dict[str, tuple[str, Callable[[Path, Path], None]]] = {
    "digits": ("digits-v1", _class_folders(_digits)),
    "faces": ("faces-v1", _class_folders(_faces)),
    "digit-boxes": ("digit-boxes-v1", _digit_boxes),
    "digit-masks": ("digit-masks-v1", _digit_masks),
    "digit-keypoints": ("digit-keypoints-v1", _digit_keypoints),
    "digit-obb": ("digit-obb-v1", _digit_obb),
}


def is_demo(spec: str | os.PathLike) -> bool:
    """Whether ``spec`` names a built-in data set (``"demo:digits"``)."""
    return isinstance(spec, str) and spec.startswith(DEMO_PREFIX)


def _write(root: Path, images: np.ndarray, labels: np.ndarray, classes: list[str]) -> None:
    samples = [(f"{i:05d}", int(label)) for i, label in enumerate(labels)]
    train, val = split_samples(samples, VAL_FRACTION, SPLIT_SEED)
    for split, items in (("train", train), ("val", val)):
        for c in classes:
            (root / split / c).mkdir(parents=True, exist_ok=True)
        for stem, label in items:
            Image.fromarray(images[int(stem)], mode="L").save(root / split / classes[label] / f"{stem}.png")


def materialise(name: str, cache: Path | None = None) -> Path:
    """Write the demo data set ``name`` (``"digits"``, ``"faces"``: ``train/`` and ``val/`` class folders;
    ``"digit-boxes"``, ``"digit-masks"``, ``"digit-keypoints"``: ``coco/`` and ``yolo/`` layouts;
    ``"digit-obb"``: ``yolo/``) unless it is already there; return its root."""
    if name not in DEMO_DATASETS:
        close = difflib.get_close_matches(name, DEMO_DATASETS, n=1)
        hint = f"did you mean demo:{close[0]}?" if close else f"choose one of {', '.join('demo:' + n for n in DEMO_DATASETS)}"
        raise ConfigError(f"unknown demo data set 'demo:{name}': {hint}")
    folder, write = DEMO_DATASETS[name]
    root = (cache or cache_dir()) / folder
    if root.is_dir():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{folder}."))
    try:
        write(tmp, root)
        try:
            os.rename(tmp, root)  # atomic; fails if another process finished first
        except OSError:
            if not root.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def resolve_root(spec: str | os.PathLike) -> Path:
    """A data root from ``spec``: a folder as it is, or ``demo:NAME`` materialised in the cache."""
    if is_demo(spec):
        return materialise(str(spec)[len(DEMO_PREFIX):])
    return Path(spec)
