"""Detection samples: the base dataset that COCO json and YOLO txt data share, and the batch collate.

A dataset holds one :class:`DetectionRecord` per image (file, image id, size, boxes xyxy in original
pixels, class indices 0..nc-1) and :class:`DetectionStats` (what the checks on load clipped, dropped
and kept). An item is ``(image, target)``: ``image`` a float32 tensor (3, H, W) in [0, 1] (RGB),
``target`` a dict with ``boxes`` float32 (n, 4) xyxy in network-input pixels, ``labels`` int64 (n,),
``image_id`` int, ``orig_size`` (h, w), ``scale`` float and ``pad`` (left, top), so that boxes in the
original image are ``(boxes - [pl, pt, pl, pt]) / scale``. Without a transform the image is the
original one (scale 1, pad (0, 0)); with :class:`vision_attn.data.det_transforms.DetectionTransform`
every image is letterboxed to the same square size.

Instance masks (only when a source is opened with ``masks=True``): each record also carries one shape
per box (polygons or an RLE, see :mod:`vision_attn.data.masks`) and its crowd instances (COCO
``iscrowd``: kept for ``segm`` evaluation, never trained on), and ``target["masks"]`` is uint8
(n, H // mask_ratio, W // mask_ratio), one binary mask per row of ``boxes`` (overlapping pixels given to
the smallest instance); :meth:`DetectionDataset.ground_truth` then adds RLE masks in original pixels
and ``iscrowd``.

Keypoints (a source opened with ``keypoints=True``: ``dataset.keypoint_spec`` says K, ``flip_idx``,
sigmas): each record carries ``keypoints`` (n, K, 3) (x, y in original pixels, visibility 0/1/2) and
``target["keypoints"]`` is float32 (n, K, 3) in network-input pixels. Oriented boxes (``obb=True``):
each record carries ``corners`` (n, 4, 2) in original pixels (its ``boxes`` are their enclosing boxes)
and ``target["rboxes"]`` is float32 (n, 5) ``cx, cy, w, h, r`` in network-input pixels, r in radians
(:func:`vision_attn.data.rotated.corners_to_xywhr`'s canonical form). :meth:`DetectionDataset.ground_truth`
adds ``keypoints`` (and ``areas``, for OKS) or ``rboxes`` in original pixels.

Every source checks its boxes with :func:`check_boxes` (clipped, degenerate and duplicate boxes named
by file and line in the data set's :class:`~vision_attn.data.faults.Faults`) and reads its images
through the same policy: a file that is not an image, truncated or gone is a problem named by path.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import cv2
import numpy as np
import torch

from vision_attn.data.faults import SKIP_HINT, Faults, decode_problem, verify_images
from vision_attn.data.keypoints import KeypointSpec
from vision_attn.data.rotated import corners_to_xywhr
from vision_attn.data.masks import Shape, instance_masks, shape_bitmap, shape_to_rle
from vision_attn.errors import DataError

__all__ = ["DetectionRecord", "CrowdInstances", "DetectionStats", "MASK_RATIO", "DetectionDataset", "clip_boxes", "check_boxes", "read_image",
           "image_to_tensor", "collate_detection", "check_boxes_kept", "yolo_targets"]

MIN_BOX_SIZE = 1e-3  # pixels: a box narrower or lower than this after clipping is degenerate
CLIP_TOLERANCE = 1e-2  # pixels: clipping less than this (rounding in normalised labels) is not counted
MASK_RATIO = 4  # target masks are this many times smaller than the network input (ultralytics' mask_ratio)


@dataclass
class CrowdInstances:
    """An image's crowd instances (COCO ``iscrowd``): boxes (m, 4) float32 xyxy, labels (m,) int64 and their
    shapes; ground truth for evaluation only."""

    boxes: np.ndarray
    labels: np.ndarray
    shapes: list[Shape]


@dataclass
class DetectionRecord:
    """One image: its file, id, size and boxes (n, 4) float32 xyxy in its pixels, labels (n,) int64; with
    masks, ``shapes`` (one per box) and ``crowd``."""

    path: Path
    image_id: int
    height: int
    width: int
    boxes: np.ndarray
    labels: np.ndarray
    shapes: list[Shape] | None = None
    crowd: CrowdInstances | None = None
    keypoints: np.ndarray | None = None  # (n, K, 3) float32 x, y pixels and visibility 0/1/2 (pose sets)
    corners: np.ndarray | None = None  # (n, 4, 2) float32 oriented boxes' corners in pixels (OBB sets)
    areas: np.ndarray | None = None  # (n,) instance areas a COCO keypoints json gives (OKS scale)


@dataclass
class DetectionStats:
    """What the checks on load found: images, negatives (no boxes), boxes kept, boxes clipped to the
    image, degenerate boxes dropped, crowd boxes skipped (COCO ``iscrowd``), images without a label file
    (YOLO, kept as negatives), duplicate boxes removed, polygons read as their enclosing boxes, images
    left out as bad files, and boxes per class."""

    images: int = 0
    negatives: int = 0
    boxes: int = 0
    clipped: int = 0
    degenerate: int = 0
    crowd: int = 0
    missing_labels: int = 0
    duplicates: int = 0
    polygons: int = 0
    skipped: int = 0
    per_class: list[int] = field(default_factory=list)

    def summary(self) -> str:
        """One line for a log: ``'2000 images (97 negatives), 6715 boxes; 0 clipped, 0 degenerate dropped'``."""
        extra = "".join(f", {n} {what}" for n, what in (
            (self.crowd, "crowd skipped"), (self.missing_labels, "without a label file"),
            (self.duplicates, "duplicates removed"), (self.polygons, "polygons read as boxes"),
            (self.skipped, "bad images skipped")) if n)
        return (f"{self.images} images ({self.negatives} negatives), {self.boxes} boxes; "
                f"{self.clipped} clipped, {self.degenerate} degenerate dropped{extra}")


def clip_boxes(boxes: np.ndarray, height: int, width: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Clip xyxy ``boxes`` (n, 4) to the image; return (clipped boxes, keep mask of the non-degenerate
    ones, how many of the kept boxes clipping moved by more than ``CLIP_TOLERANCE``)."""
    clipped = boxes.copy()
    np.clip(clipped[:, 0::2], 0, width, out=clipped[:, 0::2])
    np.clip(clipped[:, 1::2], 0, height, out=clipped[:, 1::2])
    keep = ((clipped[:, 2] - clipped[:, 0]) >= MIN_BOX_SIZE) & ((clipped[:, 3] - clipped[:, 1]) >= MIN_BOX_SIZE)
    changed = int(((np.abs(clipped - boxes) > CLIP_TOLERANCE).any(axis=1) & keep).sum())
    return clipped, keep, changed


def check_boxes(boxes: np.ndarray, labels: np.ndarray, where: list[str], image: Path, height: int, width: int,
                file: Path, faults: Faults, stats: DetectionStats) -> tuple[np.ndarray, np.ndarray]:
    """The boxes (n, 4) xyxy pixels of one image, clipped to it, without degenerate boxes and duplicate
    rows; each change is a note naming ``file`` and the row's ``where`` (``"line 3"``) and counted in
    ``stats``."""
    kept, kept_labels, _ = check_boxes_kept(boxes, labels, where, image, height, width, file, faults, stats)
    return kept, kept_labels


def check_boxes_kept(boxes: np.ndarray, labels: np.ndarray, where: list[str], image: Path, height: int,
                     width: int, file: Path, faults: Faults, stats: DetectionStats,
                     extra: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`check_boxes`, and the indices (k,) of the input rows kept (to keep their shapes); ``extra``
    (n, m): more of each row (keypoints, corners) that a duplicate must repeat too, as ultralytics
    compares whole rows."""
    clipped, ok, _ = clip_boxes(boxes, height, width)
    moved = (np.abs(clipped - boxes) > CLIP_TOLERANCE).any(axis=1) & ok
    for j in np.flatnonzero(moved):
        faults.note(file, f"box {np.round(boxes[j], 1).tolist()} of {image.name} reaches outside the {width}x{height} "
                          f"image; clipped", where[j], kind="clipped")
    for j in np.flatnonzero(~ok):
        faults.note(file, f"box {np.round(boxes[j], 1).tolist()} of {image.name} has no area inside the image; "
                          f"dropped", where[j], kind="degenerate dropped")
    stats.clipped += int(moved.sum())
    stats.degenerate += int((~ok).sum())
    keep = np.flatnonzero(ok)
    if len(keep) > 1:  # duplicate rows (same class, same box): the first is kept, as ultralytics does
        rows = np.concatenate([labels[keep, None].astype(np.float64), clipped[keep].astype(np.float64)], axis=1)
        if extra is not None:
            rows = np.concatenate([rows, np.asarray(extra, np.float64).reshape(len(boxes), -1)[keep]], axis=1)
        _, first = np.unique(rows, axis=0, return_index=True)
        if len(first) < len(keep):
            unique = np.sort(first)
            first_of = {tuple(rows[i]): i for i in unique}
            for i in sorted(set(range(len(keep))) - set(unique.tolist())):
                faults.note(file, f"duplicate of {where[keep[first_of[tuple(rows[i])]]]}; removed", where[keep[i]],
                            kind="duplicates removed")
            stats.duplicates += len(keep) - len(unique)
            keep = keep[unique]
    return clipped[keep], labels[keep], keep


def read_image(path: Path) -> np.ndarray:
    """Decode ``path`` as (H, W, 3) uint8 RGB (grey and RGBA images converted); a DataError naming the file
    if it cannot be read or decoded completely (a truncated file is not decoded in part)."""
    try:
        data = np.fromfile(path, np.uint8)
    except FileNotFoundError:
        raise DataError(f"image {path}: no such file (gone since the data set was read); restore it or remove "
                        f"it from the annotations") from None
    except OSError as e:
        raise DataError(f"image {path}: cannot be read ({e.strerror}); {SKIP_HINT}") from None
    image = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None  # None for a truncated file too
    if image is None:
        reason = decode_problem(path)[0] or "OpenCV cannot decode it"
        raise DataError(f"image {path}: {reason}; {SKIP_HINT}")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def image_to_tensor(image: np.ndarray) -> torch.Tensor:
    """(H, W, 3) uint8 -> (3, H, W) float32 in [0, 1]. In NumPy: torch's elementwise ops on a small image
    in the main process cost ~10 ms here (two intra-op threads on a busy machine), NumPy's ~0.1 ms."""
    out = image.transpose(2, 0, 1).astype(np.float32)  # a C-contiguous copy
    out /= np.float32(255.0)
    return torch.from_numpy(out)


class DetectionDataset(torch.utils.data.Dataset):
    """Images with boxes; subclasses fill ``records``, ``names``, ``category_ids`` and ``stats``.

    ``transform``: a callable ``transform(dataset, index) -> (image, target)`` (see
    :class:`~vision_attn.data.det_transforms.DetectionTransform`); None gives the original images.
    """

    records: list[DetectionRecord]
    names: list[str]  # class names, index 0..nc-1
    category_ids: list[int]  # COCO category id of each class index (never 0)
    stats: DetectionStats
    faults: Faults  # the policy for bad images and what the checks met
    masks: bool = False  # records carry shapes; items carry target["masks"]
    keypoint_spec: KeypointSpec | None = None  # records carry keypoints; items carry target["keypoints"]
    obb: bool = False  # records carry corners; items carry target["rboxes"]

    def __init__(self, transform: Callable[[DetectionDataset, int], tuple[torch.Tensor, dict]] | None = None,
                 faults: Faults | None = None):
        self.transform = transform
        self.faults = faults if faults is not None else Faults()

    @property
    def num_classes(self) -> int:
        return len(self.names)

    def __len__(self) -> int:
        return len(self.records)

    def load(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The original image (H, W, 3) uint8 RGB, its boxes (n, 4) float32 xyxy and labels (n,) int64."""
        rec = self.records[index]
        image = read_image(rec.path)
        if image.shape[:2] != (rec.height, rec.width):
            raise DataError(f"image {rec.path} is {image.shape[1]}x{image.shape[0]} (WxH) but its annotations "
                            f"say {rec.width}x{rec.height}; fix the width/height in the annotations")
        return image, rec.boxes, rec.labels

    def load_instances(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Shape]]:
        """:meth:`load` and the shapes of the boxes (polygons in original pixels or RLEs; a set opened
        with ``masks=True``)."""
        rec = self.records[index]
        if rec.shapes is None:
            raise DataError(f"image {rec.path}: the data set was opened without masks; open it with masks=True")
        image, boxes, labels = self.load(index)
        return image, boxes, labels, rec.shapes

    def load_points(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`load` and the boxes' keypoints (n, K, 3) or corners (n, 4, 2) in original pixels (a set
        opened with ``keypoints=True`` or ``obb=True``)."""
        rec = self.records[index]
        points = rec.keypoints if rec.keypoints is not None else rec.corners
        if points is None:
            raise DataError(f"image {rec.path}: the data set was opened without keypoints or oriented boxes; open "
                            f"it with keypoints=True or obb=True")
        image, boxes, labels = self.load(index)
        return image, boxes, labels, points

    def __getitem__(self, index: int) -> tuple[torch.Tensor, dict[str, Any]]:
        if self.transform is not None:
            return self.transform(self, index)
        image, boxes, labels = self.load(index)
        rec = self.records[index]
        target = {
            "boxes": torch.from_numpy(boxes.copy()), "labels": torch.from_numpy(labels.copy()),
            "image_id": rec.image_id, "orig_size": (rec.height, rec.width), "scale": 1.0, "pad": (0, 0)}
        if self.masks and rec.shapes is not None:
            full = np.stack([shape_bitmap(s, rec.height, rec.width) for s in rec.shapes]) if rec.shapes else \
                np.zeros((0, rec.height, rec.width), np.uint8)
            target["masks"] = torch.from_numpy(instance_masks(full, MASK_RATIO))
        if rec.keypoints is not None:
            target["keypoints"] = torch.from_numpy(rec.keypoints.astype(np.float32))
        if rec.corners is not None:
            target["rboxes"] = torch.from_numpy(corners_to_xywhr(rec.corners).astype(np.float32).reshape(-1, 5))
        return image_to_tensor(image), target

    def ground_truth(self) -> list[dict[str, Any]]:
        """Per image ``{image_id, boxes (n, 4) xyxy original pixels, labels, orig_size}``, the form that
        :func:`vision_attn.evaluation.coco_map` takes. With masks: crowd instances appended after the
        boxes, ``masks`` (a compressed COCO RLE per box, original pixels) and ``iscrowd`` (n,) bool."""
        if self.keypoint_spec is not None or self.obb:
            return [self._point_truth(r) for r in self.records]
        if not self.masks:
            return [{"image_id": r.image_id, "boxes": r.boxes, "labels": r.labels, "orig_size": (r.height, r.width)}
                    for r in self.records]
        out = []
        for r in self.records:
            crowd = r.crowd if r.crowd is not None else CrowdInstances(np.zeros((0, 4), np.float32),
                                                                        np.zeros(0, np.int64), [])
            shapes = [*(r.shapes or []), *crowd.shapes]
            out.append({"image_id": r.image_id, "boxes": np.concatenate([r.boxes, crowd.boxes]).astype(np.float32),
                        "labels": np.concatenate([r.labels, crowd.labels]).astype(np.int64),
                        "orig_size": (r.height, r.width),
                        "masks": [shape_to_rle(s, r.height, r.width) for s in shapes],
                        "iscrowd": np.concatenate([np.zeros(len(r.labels), bool), np.ones(len(crowd.labels), bool)])})
        return out

    def _point_truth(self, r: DetectionRecord) -> dict[str, Any]:
        """One image's ground truth with ``keypoints`` (n, K, 3) and ``areas`` (n,) (the instances' areas
        for OKS: the COCO ``area`` when the source has one, else 0.53 x the box's, as ultralytics takes
        it), or with ``rboxes`` (n, 5) xywhr, in original pixels."""
        out = {"image_id": r.image_id, "boxes": r.boxes, "labels": r.labels, "orig_size": (r.height, r.width)}
        if r.keypoints is not None:
            out["keypoints"] = r.keypoints
            box_areas = (r.boxes[:, 2] - r.boxes[:, 0]) * (r.boxes[:, 3] - r.boxes[:, 1]) * 0.53
            out["areas"] = np.asarray(r.areas if r.areas is not None else box_areas, np.float64)
        if r.corners is not None:
            out["rboxes"] = corners_to_xywhr(r.corners).reshape(-1, 5)
        return out

    def verify(self, threads: int = 4,
               progress: Callable[[int, int], None] | None = None) -> dict[str, tuple[int, int]]:
        """Decode every image once; those that fail go to ``faults`` and are left out (with ``"raise"``:
        the first is an error). Returns the sizes of the images that decode."""
        sizes = verify_images([r.path for r in self.records], self.faults, threads, progress)
        if len(sizes) < len(self.records):  # the ones without a size did not decode
            self.stats.skipped += len(self.records) - len(sizes)
            self.records = [r for r in self.records if str(r.path) in sizes]
            self.stats = self._finish_stats(self.stats)
        return sizes

    def _finish_stats(self, stats: DetectionStats) -> DetectionStats:
        stats.images = len(self.records)
        stats.negatives = sum(1 for r in self.records if len(r.labels) == 0)
        stats.boxes = sum(len(r.labels) for r in self.records)
        counts = np.bincount(np.concatenate([r.labels for r in self.records] or [np.zeros(0, np.int64)]),
                             minlength=len(self.names))
        stats.per_class = counts.tolist()
        return stats


def collate_detection(batch: Sequence[tuple[torch.Tensor, dict[str, Any]]]) -> dict[str, Any]:
    """Items of one size -> ``{images (B, 3, H, W), boxes [(n_i, 4)], labels [(n_i,)], image_ids,
    orig_sizes, scales, pads}`` (lists of length B, boxes in network-input pixels), and ``masks``
    [(n_i, Hm, Wm) uint8] when the items carry masks; ``keypoints`` [(n_i, K, 3)] or ``rboxes``
    [(n_i, 5)] (network-input pixels) when they carry those, with ``targets`` (:func:`yolo_targets`);
    ``corners`` [(n_i, 4, 2)] (original pixels, the items of ``data.augment: device``) as they are
    (those items' images are (S, S, 3) uint8: stacked as they come)."""
    images = [image for image, _ in batch]
    if len({tuple(im.shape) for im in images}) > 1:
        raise DataError(f"collate_detection: images of different sizes {sorted({tuple(im.shape) for im in images})}; "
                        f"give the dataset a DetectionTransform(img_size=...) so every image is letterboxed")
    targets = [t for _, t in batch]
    stacked = torch.from_numpy(np.stack([im.numpy() for im in images]))  # NumPy: see image_to_tensor (uint8 too)
    out = {"images": stacked, "boxes": [t["boxes"] for t in targets],
           "labels": [t["labels"] for t in targets], "image_ids": [int(t["image_id"]) for t in targets],
           "orig_sizes": [tuple(t["orig_size"]) for t in targets], "scales": [float(t["scale"]) for t in targets],
           "pads": [tuple(t["pad"]) for t in targets]}
    for key, what in (("masks", "masks=True"), ("keypoints", "keypoints=True"), ("rboxes", "obb=True"),
                      ("corners", "obb=True")):
        carried = sum(key in t for t in targets)
        if carried == len(targets):
            out[key] = [t[key] for t in targets]
        elif carried:
            raise DataError(f"collate_detection: {carried} of {len(targets)} items carry {key}; give every item's "
                            f"data set {what}")
    if "keypoints" in out or "rboxes" in out:
        out["targets"] = yolo_targets(out)
    return out


def yolo_targets(batch: dict[str, Any], size: tuple[int, int] | None = None) -> dict[str, torch.Tensor]:
    """A collated batch's instances flattened as ultralytics' trainers hand them to their losses
    (``v8DetectionLoss``, ``v8PoseLoss``, ``v8OBBLoss``): ``batch_idx`` (N,) float (the image of each
    instance), ``cls`` (N, 1) float, ``bboxes`` (N, 4) cx, cy, w, h normalised by the input's width and
    height, or with ``rboxes`` (N, 5) cx, cy, w, h normalised and r in radians, and with ``keypoints``
    ``keypoints`` (N, K, 3): x, y normalised, visibility as it is. ``size``: the input's (h, w) when the
    batch's images are not (B, 3, h, w)."""
    h, w = size if size is not None else batch["images"].shape[-2:]
    counts = [len(b) for b in batch["labels"]]
    out = {"batch_idx": torch.repeat_interleave(torch.arange(len(counts), dtype=torch.float32),
                                                torch.tensor(counts, dtype=torch.long)),
           "cls": torch.cat([lab.reshape(-1) for lab in batch["labels"]]).float().reshape(-1, 1)}
    scale = torch.tensor([w, h, w, h], dtype=torch.float32)
    if "rboxes" in batch:
        r = torch.cat([b.reshape(-1, 5) for b in batch["rboxes"]]).float()
        out["bboxes"] = torch.cat([r[:, :4] / scale, r[:, 4:]], dim=1)
    else:
        xyxy = torch.cat([b.reshape(-1, 4) for b in batch["boxes"]]).float()
        out["bboxes"] = torch.cat([(xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]], dim=1) / scale
    if "keypoints" in batch:
        k = torch.cat(list(batch["keypoints"])).float()
        out["keypoints"] = k / torch.tensor([w, h, 1.0], dtype=torch.float32)
    return out
