"""Detection augmentation (albumentations with box parameters): letterbox, mosaic, affine, flips, HSV.

:class:`DetectionTransform` turns ``dataset[index]`` into one item of the batch contract of
:mod:`vision_attn.data.detection`, every image letterboxed to ``img_size`` x ``img_size``:

- evaluation (``train=False``): letterbox only: ``LongestMaxSize(img_size)`` then ``PadIfNeeded``
  centred with grey 114; ``scale = img_size / max(h, w)`` and ``pad = (left, top)`` are recorded, so
  original boxes are ``(boxes - [pl, pt, pl, pt]) / scale`` (within half a pixel: the resized side is
  rounded to whole pixels).
- training: with probability ``mosaic`` a 4-image mosaic (this image and three random ones, each
  resized to ``img_size`` on its long side, meeting at a random centre of a 2x canvas), else the
  letterbox; then ``Affine`` (scale ``1 +- scale``, translation ``+- translate`` of the size) and a
  centre crop to ``img_size``, HSV-style colour jitter and flips (off by default: flipped digits are
  wrong digits). Boxes are clipped; those with less than ``min_visibility`` of their area left, or
  narrower than 2 px, are dropped. Train items record the letterbox's scale and pad (mosaic: 1.0 and
  (0, 0)); only their boxes are meaningful after augmentation.

Masks (``masks=True``, for a data set opened with ``masks=True``): every instance's shape follows the
same geometry as its box (:mod:`vision_attn.data.shape_transforms`: polygons through the exact steps
the pipeline applied, RLE bitmaps warped with the image by nearest neighbour, both cut to mosaic tiles
and to the image), the same instances are dropped, and ``target["masks"]`` is uint8
(n, S // mask_ratio, S // mask_ratio) aligned with ``boxes``, overlapping pixels given to the smallest
instance with ``overlap`` (:func:`vision_attn.data.masks.instance_masks`). In training the boxes of
the kept instances are recomputed from their transformed shapes (polygon points, or bitmap pixels,
inside the image), as ultralytics does after its affine, so box and mask agree; an instance left
narrower or lower than 2 px is dropped. ``degrees`` and ``shear`` add rotation and shear to the
affine (0 by default; with masks or without).

Keypoints (``keypoints=True``, a data set opened with ``keypoints=True``) and oriented boxes
(``obb=True``, opened with ``obb=True``) follow the same geometry as the boxes, point by point
(:func:`~vision_attn.data.shape_transforms.replay_points`; on the mosaic, scaled and moved with their
image): a keypoint that leaves its mosaic tile or the image gets visibility 0 and its coordinates are
clipped to the image (as ultralytics' ``Instances.clip``); a horizontal flip swaps the points by the
set's ``flip_idx`` (an error if the set has none). An oriented box's corners are re-fit after the
affine (a sheared one to its minimum-area rectangle) and, where it leaves a tile or the image, to the
rectangle in its own orientation bounding its visible part (:func:`~vision_attn.data.rotated.fit_visible`,
ultralytics' ``preserve_obb``); ``target["rboxes"]`` (n, 5) is ``cx, cy, w, h, r`` in the canonical
form (:func:`~vision_attn.data.rotated.corners_to_xywhr`) and ``boxes`` are its enclosing boxes in the
image. The same instances are dropped as without points (``min_visibility``; in training, boxes
narrower than 2 px).

Switch the mosaic off for the last epochs with ``transform.mosaic = 0.0`` (or ``close_mosaic()``): the
value lives in shared memory, so DataLoader workers, persistent ones included, see the change at their
next item. Seeding: ``seed`` (or ``set_random_seed``, which :func:`vision_attn.data.seed_worker`
calls in each worker) seeds the mosaic choices and every albumentations pipeline.
"""
from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # no network check on import

import albumentations as A  # noqa: E402
import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from vision_attn.data.detection import MASK_RATIO, DetectionDataset, image_to_tensor  # noqa: E402
from vision_attn.data.masks import (  # noqa: E402
    Shape,
    clip_polygon,
    decode_rle,
    fill_polygons,
    instance_masks,
    mask_boxes,
    polygon_boxes,
)
from vision_attn.data.rotated import corners_to_xywhr, fit_visible  # noqa: E402
from vision_attn.data.shape_transforms import place_bitmap, place_polygons, replay_points  # noqa: E402
from vision_attn.errors import ConfigError  # noqa: E402

__all__ = ["DetectionTransform", "letterbox_params", "clip_keypoints", "mosaic_tile", "place_boxes", "place_points",
           "finish_points", "PAD_VALUE"]

PAD_VALUE = 114  # grey of the letterbox and mosaic borders, as in the YOLO family


def letterbox_params(height: int, width: int, size: int,
                     stride: int | None = None) -> tuple[float, tuple[int, int], tuple[int, int]]:
    """Scale, resized (h, w) and pad (left, top) that ``LongestMaxSize(size)`` + centred ``PadIfNeeded``
    give an image of ``height`` x ``width`` (albumentations rounds the resized sides with ``round``):
    padded to ``size`` x ``size``, or with ``stride`` each side to the next multiple of ``stride``."""
    scale = size / max(height, width)
    nh, nw = max(1, round(height * scale)), max(1, round(width * scale))
    ph, pw = (size, size) if stride is None else (-(-nh // stride) * stride, -(-nw // stride) * stride)
    return scale, (nh, nw), (int((pw - nw) / 2.0), int((ph - nh) / 2.0))


class DetectionTransform:
    """``transform(dataset, index) -> (image (3, S, S) float32 in [0, 1], target)`` with S = ``img_size``.

    ``mosaic``: probability of a 4-image mosaic (training only); ``hflip``/``vflip``: flip probabilities;
    ``scale``, ``translate``: affine ranges; ``hsv``: (hue, saturation, value) shift limits;
    ``min_visibility``: the fraction of a box that must survive cropping to keep it. ``stride``
    (evaluation only): pad each side to the next multiple of ``stride`` instead of to a square, as
    ultralytics' predict does for images of one size (a 640x480 frame is 640x480, not 640x640).
    ``masks``: items carry ``target["masks"]`` at 1 / ``mask_ratio`` of the input, ``overlap`` as
    ultralytics' ``overlap_mask``; ``degrees``, ``shear``: rotation and shear ranges of the affine.
    """

    def __init__(self, img_size: int, *, train: bool = False, mosaic: float = 1.0, hflip: float = 0.0,
                 vflip: float = 0.0, scale: float = 0.5, translate: float = 0.1,
                 hsv: tuple[float, float, float] = (5.0, 40.0, 30.0), min_visibility: float = 0.25,
                 seed: int | None = None, stride: int | None = None, masks: bool = False,
                 mask_ratio: int = MASK_RATIO, overlap: bool = True, degrees: float = 0.0, shear: float = 0.0,
                 keypoints: bool = False, obb: bool = False):
        if not (isinstance(img_size, int) and img_size >= 8):
            raise ConfigError(f"img_size={img_size!r}: give a square size in pixels, an int >= 8")
        for name, p in (("mosaic", mosaic), ("hflip", hflip), ("vflip", vflip), ("min_visibility", min_visibility)):
            if not 0 <= p <= 1:
                raise ConfigError(f"{name}={p}: give a probability in [0, 1]")
        if not 0 <= scale < 1 or not 0 <= translate <= 0.5:
            raise ConfigError(f"scale={scale}, translate={translate}: give 0 <= scale < 1 and 0 <= translate <= 0.5")
        if stride is not None and (train or not (isinstance(stride, int) and stride >= 1)):
            raise ConfigError(f"stride={stride!r}: rectangular letterboxing is for evaluation (train=False), with an "
                              "int stride >= 1")
        if not (isinstance(mask_ratio, int) and mask_ratio >= 1 and img_size % mask_ratio == 0):
            raise ConfigError(f"mask_ratio={mask_ratio!r}: give an int >= 1 that divides img_size={img_size}")
        if not 0 <= degrees <= 180 or not 0 <= shear < 90:
            raise ConfigError(f"degrees={degrees}, shear={shear}: give 0 <= degrees <= 180 and 0 <= shear < 90")
        self.img_size, self.train, self.min_visibility, self.stride = img_size, train, min_visibility, stride
        if masks + keypoints + obb > 1:
            raise ConfigError("DetectionTransform: choose one of masks, keypoints or obb")
        self.masks, self.mask_ratio, self.overlap = masks, mask_ratio, overlap
        self.keypoints, self.obb = keypoints, obb
        tracked = masks or keypoints or obb  # instances followed by id through the pipeline
        self._mosaic = torch.tensor([float(mosaic) if train else 0.0]).share_memory_()
        s = img_size
        boxes = A.BboxParams(format="pascal_voc", label_fields=["labels", "ids"] if tracked else ["labels"], clip=True,
                             min_visibility=min_visibility, min_width=2 if train else 0, min_height=2 if train else 0)
        replay = {"save_applied_params": True} if tracked else {}
        pad = {"min_height": s, "min_width": s} if stride is None else {
            "min_height": None, "min_width": None, "pad_height_divisor": stride, "pad_width_divisor": stride}
        letterbox = [A.LongestMaxSize(max_size=s, interpolation=cv2.INTER_LINEAR, p=1.0),
                     A.PadIfNeeded(**pad, position="center", border_mode=cv2.BORDER_CONSTANT, fill=PAD_VALUE, p=1.0)]
        if not train:
            self._letterbox = A.Compose(letterbox, bbox_params=boxes, strict=True, seed=seed, **replay)
            self._pipelines: list[A.Compose] = [self._letterbox]
            self._rng = np.random.default_rng(seed)
            return
        extra: list[A.BasicTransform] = []
        if any(hsv):
            extra.append(A.HueSaturationValue(hue_shift_limit=hsv[0], sat_shift_limit=hsv[1], val_shift_limit=hsv[2],
                                              p=1.0))
        if hflip > 0:
            extra.append(A.HorizontalFlip(p=hflip))
        if vflip > 0:
            extra.append(A.VerticalFlip(p=vflip))
        turns = {k: (-v, v) for k, v in (("rotate", degrees), ("shear", shear)) if v}
        affine = A.Affine(scale=(1 - scale, 1 + scale), translate_percent=(-translate, translate), **turns,
                          interpolation=cv2.INTER_LINEAR, border_mode=cv2.BORDER_CONSTANT, fill=PAD_VALUE, p=1.0)
        self._letterbox = A.Compose([*letterbox, affine, *extra], bbox_params=boxes, strict=True, seed=seed, **replay)
        # the mosaic canvas is 2S x 2S: scale about its centre, then keep the centre S x S
        self._mosaic_tail = A.Compose([affine, A.CenterCrop(height=s, width=s), *extra], bbox_params=boxes,
                                      strict=True, seed=None if seed is None else seed + 1, **replay)
        self._pipelines = [self._letterbox, self._mosaic_tail]
        self._rng = np.random.default_rng(seed)

    @property
    def mosaic(self) -> float:
        """Probability of a mosaic; setting it reaches DataLoader workers (shared memory)."""
        return float(self._mosaic[0])

    @mosaic.setter
    def mosaic(self, p: float) -> None:
        if not 0 <= float(p) <= 1:
            raise ConfigError(f"mosaic={p}: give a probability in [0, 1]")
        self._mosaic[0] = float(p) if self.train else 0.0

    def close_mosaic(self) -> None:
        """No more mosaics (the usual switch for the last epochs)."""
        self.mosaic = 0.0

    def set_random_seed(self, seed: int) -> None:
        """Reseed the mosaic choices and the albumentations pipelines (one worker, one epoch)."""
        self._rng = np.random.default_rng(seed)
        for i, pipeline in enumerate(self._pipelines):
            pipeline.set_random_seed(seed + i)

    def __call__(self, dataset: DetectionDataset, index: int) -> tuple[torch.Tensor, dict[str, Any]]:
        if self.masks:
            return self._with_masks(dataset, index)
        if self.keypoints or self.obb:
            return self._with_points(dataset, index)
        rec = dataset.records[index]
        p = self.mosaic
        if p > 0 and self._rng.random() < p:
            image, boxes, labels = self._mosaic_image(dataset, index)
            out = self._mosaic_tail(image=image, bboxes=boxes, labels=labels)
            scale, pad = 1.0, (0, 0)
        else:
            image, boxes, labels = dataset.load(index)
            out = self._letterbox(image=image, bboxes=boxes, labels=labels)
            scale, _, pad = letterbox_params(rec.height, rec.width, self.img_size, self.stride)
        out_boxes = np.asarray(out["bboxes"], dtype=np.float32).reshape(-1, 4)
        out_labels = np.asarray(out["labels"], dtype=np.int64).reshape(-1)
        return image_to_tensor(out["image"]), {
            "boxes": torch.from_numpy(out_boxes), "labels": torch.from_numpy(out_labels), "image_id": rec.image_id,
            "orig_size": (rec.height, rec.width), "scale": float(scale), "pad": pad}

    def _instances(self, dataset: DetectionDataset, index: int, points: bool) -> tuple[Any, ...]:
        """The image, boxes, labels and instance shapes (decoded) or ``points`` (keypoints or corners) of a
        mosaic around ``index`` (with probability ``mosaic``) or of the image alone, with the pipeline that
        finishes it and the letterbox's scale and pad."""
        p = self.mosaic
        if p > 0 and self._rng.random() < p:
            image, boxes, labels, extra = self._mosaic_image(dataset, index, with_shapes=not points,
                                                             with_points=points)
            return image, boxes, labels, extra, self._mosaic_tail, 1.0, (0, 0)
        if points:
            image, boxes, labels, extra = dataset.load_points(index)
        else:
            image, boxes, labels, shapes = dataset.load_instances(index)
            extra = [s if isinstance(s, list) else decode_rle(s) for s in shapes]
        rec = dataset.records[index]
        scale, _, pad = letterbox_params(rec.height, rec.width, self.img_size, self.stride)
        return image, boxes, labels, extra, self._letterbox, scale, pad

    def _with_masks(self, dataset: DetectionDataset, index: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """An item with ``target["masks"]`` (see the module docstring)."""
        if not dataset.masks:
            raise ConfigError(f"DetectionTransform(masks=True) on {dataset!r}, opened without masks; open it with "
                              f"masks=True")
        rec = dataset.records[index]
        image, boxes, labels, shapes, pipeline, scale, pad = self._instances(dataset, index, points=False)
        bitmaps = [i for i, s in enumerate(shapes) if not isinstance(s, list)]
        inputs: dict[str, Any] = {"image": image, "bboxes": boxes, "labels": labels, "ids": np.arange(len(labels))}
        if bitmaps:
            inputs["masks"] = [shapes[i] for i in bitmaps]
        out = pipeline(**inputs)
        h, w = out["image"].shape[:2]
        out_boxes = np.asarray(out["bboxes"], dtype=np.float32).reshape(-1, 4)
        out_labels = np.asarray(out["labels"], dtype=np.int64).reshape(-1)
        ids = np.asarray(out["ids"], dtype=np.int64).reshape(-1)
        slot = {i: k for k, i in enumerate(bitmaps)}
        edge = np.array([w - 1e-3, h - 1e-3], np.float32)  # just inside the far border (see the fill below)
        full = np.zeros((len(ids), h, w), np.uint8)
        shape_boxes = np.zeros((len(ids), 4), np.float32)
        for k, i in enumerate(ids.tolist()):
            if i in slot:
                full[k] = np.asarray(out["masks"][slot[i]], dtype=np.uint8)
                shape_boxes[k] = mask_boxes(full[k:k + 1])[0]
            else:
                polys = [clip_polygon(replay_points(q, out["applied_transforms"], (h, w)), 0, 0, w, h)
                         for q in shapes[i]]
                polys = [q for q in polys if len(q) >= 3]
                # filled with coordinates truncated to pixels: a border at x = w is the last column's far edge
                full[k] = fill_polygons([np.minimum(q, edge) for q in polys], h, w)
                shape_boxes[k] = polygon_boxes([polys])[0]
        if self.train and len(ids):  # boxes from the shapes, as ultralytics after its affine; slivers dropped
            keep = ((shape_boxes[:, 2] - shape_boxes[:, 0]) >= 2) & ((shape_boxes[:, 3] - shape_boxes[:, 1]) >= 2)
            out_boxes, out_labels, full = shape_boxes[keep], out_labels[keep], full[keep]
        return image_to_tensor(out["image"]), {
            "boxes": torch.from_numpy(out_boxes), "labels": torch.from_numpy(out_labels), "image_id": rec.image_id,
            "orig_size": (rec.height, rec.width), "scale": float(scale), "pad": pad,
            "masks": torch.from_numpy(instance_masks(full, self.mask_ratio, self.overlap))}

    def _with_points(self, dataset: DetectionDataset, index: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """An item with ``target["keypoints"]`` or ``target["rboxes"]`` (see the module docstring)."""
        spec = dataset.keypoint_spec
        if (spec is None) if self.keypoints else not dataset.obb:
            kind = "keypoints" if self.keypoints else "obb"
            raise ConfigError(f"DetectionTransform({kind}=True) on {dataset!r}, opened without {kind}; open it with "
                              f"{kind}=True")
        rec = dataset.records[index]
        image, boxes, labels, points, pipeline, scale, pad = self._instances(dataset, index, points=True)
        out = pipeline(image=image, bboxes=boxes, labels=labels, ids=np.arange(len(labels)))
        h, w = out["image"].shape[:2]
        out_boxes = np.asarray(out["bboxes"], dtype=np.float32).reshape(-1, 4)
        out_labels = np.asarray(out["labels"], dtype=np.int64).reshape(-1)
        ids = np.asarray(out["ids"], dtype=np.int64).reshape(-1)
        target: dict[str, Any] = {"image_id": rec.image_id, "orig_size": (rec.height, rec.width),
                                  "scale": float(scale), "pad": pad}
        target.update(finish_points(np.asarray(points, np.float32)[ids], out_boxes, out_labels,
                                    out["applied_transforms"], (h, w), keypoints=self.keypoints,
                                    flip_idx=spec.flip_idx if spec is not None else None, train=self.train,
                                    where=repr(dataset)))
        return image_to_tensor(out["image"]), target

    def _mosaic_image(self, dataset: DetectionDataset, index: int, with_shapes: bool = False,
                      with_points: bool = False) -> tuple[Any, ...]:
        """A 2S x 2S canvas of four images around a random centre; boxes clipped to each image's visible
        part and dropped below ``min_visibility``. ``with_shapes``: also the kept instances' shapes on
        the canvas (polygons cut to their tile, or (2S, 2S) bitmaps); ``with_points``: their keypoints
        (visibility 0 outside the tile) or oriented boxes' corners (fit to the tile), (n, K, 3) / (n, 4, 2)."""
        s = self.img_size
        canvas = np.full((2 * s, 2 * s, 3), PAD_VALUE, dtype=np.uint8)
        xc, yc = (int(v) for v in self._rng.integers(s // 2, 3 * s // 2 + 1, size=2))
        indices = [index, *(int(i) for i in self._rng.integers(0, len(dataset), size=3))]
        all_boxes, all_labels = [], []
        all_shapes: list[Shape | np.ndarray] = []
        all_points: list[np.ndarray] = []
        for k, i in enumerate(indices):
            if with_points:
                image, boxes, labels, points = dataset.load_points(i)
            elif with_shapes:
                image, boxes, labels, shapes = dataset.load_instances(i)
            else:
                image, boxes, labels = dataset.load(i)
            h0, w0 = image.shape[:2]
            r = s / max(h0, w0)
            if r != 1:
                image = cv2.resize(image, (max(1, round(w0 * r)), max(1, round(h0 * r))), interpolation=cv2.INTER_LINEAR)
            h, w = image.shape[:2]
            xa, ya, xb, yb, sx, sy = mosaic_tile(k, xc, yc, h, w, s)
            canvas[ya:yb, xa:xb] = image[sy:sy + (yb - ya), sx:sx + (xb - xa)]
            if len(boxes) == 0:
                continue
            kept, ok = place_boxes(boxes, r, (xa, ya, xb, yb), (sx, sy), self.min_visibility)
            if with_points:
                placed_points = place_points(points, r, xa - sx, ya - sy, (xa, ya, xb, yb))
                ok &= np.array([q is not None for q in placed_points], bool)
                all_points += [q for q, o in zip(placed_points, ok) if o]
            all_boxes.append(kept[ok])
            all_labels.append(labels[ok])
            if with_shapes:
                tile = (xa, ya, xb, yb)
                for j in np.flatnonzero(ok):
                    s_j = shapes[j]
                    if isinstance(s_j, list):
                        all_shapes.append(place_polygons(s_j, r, xa - sx, ya - sy, tile))
                    else:
                        all_shapes.append(place_bitmap(decode_rle(s_j), (w, h), canvas.shape[:2], (sx, sy), tile))
        boxes = np.concatenate(all_boxes) if all_boxes else np.zeros((0, 4), np.float32)
        labels = np.concatenate(all_labels) if all_labels else np.zeros(0, np.int64)
        if with_shapes:
            return canvas, boxes, labels, all_shapes
        if with_points:
            tail = (dataset.keypoint_spec.num, 3) if dataset.keypoint_spec is not None else (4, 2)
            return canvas, boxes, labels, np.array(all_points, np.float32).reshape(-1, *tail)
        return canvas, boxes, labels


def mosaic_tile(k: int, xc: int, yc: int, h: int, w: int, s: int) -> tuple[int, int, int, int, int, int]:
    """Where the ``k``-th image (0: top left, 1: top right, 2: bottom left, 3: bottom right) of a mosaic,
    resized to (``h``, ``w``), goes on the 2S x 2S canvas whose images meet at (``xc``, ``yc``): its tile
    (xa, ya, xb, yb) on the canvas and the tile's top-left corner (sx, sy) in the image."""
    if k == 0:  # top left: the image's bottom-right corner at the centre
        xa, ya, xb, yb = max(xc - w, 0), max(yc - h, 0), xc, yc
        return xa, ya, xb, yb, w - (xb - xa), h - (yb - ya)
    if k == 1:  # top right
        xa, ya, xb, yb = xc, max(yc - h, 0), min(xc + w, 2 * s), yc
        return xa, ya, xb, yb, 0, h - (yb - ya)
    if k == 2:  # bottom left
        xa, ya, xb, yb = max(xc - w, 0), yc, xc, min(yc + h, 2 * s)
        return xa, ya, xb, yb, w - (xb - xa), 0
    xa, ya, xb, yb = xc, yc, min(xc + w, 2 * s), min(yc + h, 2 * s)  # bottom right
    return xa, ya, xb, yb, 0, 0


def place_boxes(boxes: np.ndarray, r: float, tile: tuple[int, int, int, int], src: tuple[int, int],
                min_visibility: float) -> tuple[np.ndarray, np.ndarray]:
    """An image's boxes (n, 4) on the mosaic canvas: scaled by ``r``, moved to ``tile`` (xa, ya, xb, yb)
    whose corner is ``src`` (sx, sy) in the resized image, clipped to the tile; and which of them keep at
    least ``min_visibility`` of their area (and some area) there, (n,) bool."""
    xa, ya, xb, yb = tile
    placed = boxes * np.float32(r) + np.array([xa - src[0], ya - src[1]] * 2, dtype=np.float32)
    kept = placed.copy()
    np.clip(kept[:, 0::2], xa, xb, out=kept[:, 0::2])
    np.clip(kept[:, 1::2], ya, yb, out=kept[:, 1::2])
    area = (placed[:, 2] - placed[:, 0]) * (placed[:, 3] - placed[:, 1])
    visible = (kept[:, 2] - kept[:, 0]) * (kept[:, 3] - kept[:, 1])
    return kept, (visible > 0) & (visible >= min_visibility * area)


def finish_points(points: np.ndarray, boxes: np.ndarray, labels: np.ndarray,
                  applied: list[tuple[str, dict[str, Any]]], size: tuple[int, int], *, keypoints: bool,
                  flip_idx: Any, train: bool, where: str) -> dict[str, torch.Tensor]:
    """The target tensors of the instances kept by the pipeline (``boxes`` (n, 4), ``labels`` (n,) and their
    ``points`` (n, K, 3) keypoints or (n, 4, 2) corners in the pipeline's input), moved through ``applied``
    (``out["applied_transforms"]``, or the same steps of the device path) to the output image of (h, w)
    ``size``: keypoints clipped (visibility 0 outside) and swapped by ``flip_idx`` after a horizontal flip;
    corners re-fit to their visible part (instances with none dropped; in training also those narrower than
    2 px) with ``rboxes`` and their enclosing ``boxes``."""
    h, w = size
    if keypoints:
        kpts = np.asarray(points, np.float32).copy()
        kpts[..., :2] = replay_points(kpts[..., :2].reshape(-1, 2), applied, (h, w)).reshape(kpts[..., :2].shape)
        kpts = clip_keypoints(kpts, w, h)
        if any(name == "HorizontalFlip" for name, _ in applied):
            if flip_idx is None:
                raise ConfigError(f"{where}: a horizontal flip needs the keypoints' flip_idx (the data YAML's "
                                  f"flip_idx); give it, or set hflip to 0")
            kpts = kpts[:, list(flip_idx)]
        return {"boxes": torch.from_numpy(np.ascontiguousarray(boxes, np.float32)),
                "labels": torch.from_numpy(np.ascontiguousarray(labels, np.int64)),
                "keypoints": torch.from_numpy(np.ascontiguousarray(kpts, np.float32))}
    moved = replay_points(np.asarray(points, np.float32).reshape(-1, 2), applied, (h, w))
    fitted = [fit_visible(c, 0, 0, w, h) for c in moved.reshape(len(points), 4, 2)]
    keep = np.array([f is not None for f in fitted], bool)
    rects = np.array([f for f in fitted if f is not None], np.float32).reshape(-1, 4, 2)
    shape_boxes = np.concatenate([rects.min(1), rects.max(1)], axis=1).reshape(-1, 4)
    np.clip(shape_boxes, 0, [w, h, w, h], out=shape_boxes)
    if train:  # slivers dropped, as the boxes are
        wide = (shape_boxes[:, 2:] - shape_boxes[:, :2] >= 2).all(axis=1)
        keep[keep] = wide
        rects, shape_boxes = rects[wide], shape_boxes[wide]
    return {"boxes": torch.from_numpy(np.ascontiguousarray(shape_boxes, np.float32)),
            "labels": torch.from_numpy(np.ascontiguousarray(np.asarray(labels, np.int64).reshape(-1)[keep])),
            "rboxes": torch.from_numpy(corners_to_xywhr(rects).astype(np.float32).reshape(-1, 5))}


def clip_keypoints(kpts: np.ndarray, w: float, h: float) -> np.ndarray:
    """Keypoints (n, K, 3): visibility 0 where a point lies outside [0, w] x [0, h], coordinates clipped to
    it (ultralytics' ``Instances.clip``)."""
    out = np.asarray(kpts, np.float32).copy()
    x, y = out[..., 0], out[..., 1]
    out[..., 2][(x < 0) | (x > w) | (y < 0) | (y > h)] = 0
    np.clip(out[..., 0], 0, w, out=out[..., 0])
    np.clip(out[..., 1], 0, h, out=out[..., 1])
    return out


def place_points(points: np.ndarray, r: float, dx: float, dy: float,
                  tile: tuple[int, int, int, int]) -> list[np.ndarray | None]:
    """An image's keypoints (n, K, 3) or corners (n, 4, 2) on the mosaic canvas: scaled by ``r``, moved by
    (``dx``, ``dy``); keypoints outside ``tile`` (xa, ya, xb, yb) get visibility 0, corners are fit to it
    (None: nothing of the box in the tile)."""
    xa, ya, xb, yb = tile
    out: list[np.ndarray | None] = []
    for p in np.asarray(points, np.float32):
        q = p.copy()
        q[:, :2] = q[:, :2] * np.float32(r) + np.array([dx, dy], np.float32)
        if q.shape[1] == 3:
            x, y = q[:, 0], q[:, 1]
            q[(x < xa) | (x > xb) | (y < ya) | (y > yb), 2] = 0
            out.append(q)
        else:
            out.append(fit_visible(q, xa, ya, xb, yb))
    return out
