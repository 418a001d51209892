"""Detection augmentation on the device (``data.augment: device``): the workers read and decode, the
batch is mosaicked, warped, colour-jittered and flipped where it is (the GPU).

The loader path (:class:`~vision_attn.data.det_transforms.DetectionTransform`) decodes four images per
mosaic item and warps, jitters and flips each item with OpenCV in a worker process. Here a worker
does only what needs the file: :class:`DetectionItems` decodes one image, resizes it to ``S`` on its
long side if it is not that size (the step both loader paths begin with) and puts it at the top left
of a fixed S x S x 3 uint8 canvas (channels last, as decoded: no transposing copy in the worker), with
its boxes (and keypoints or corners) in original pixels. The data module then augments each training
batch (:class:`DetectionDeviceAugment`):

- :meth:`~DetectionDeviceAugment.plan` (on the CPU, before the copy): the draws, from a generator
  seeded by (seed, rank, epoch, batch), and every image's targets. The distributions are those of
  the loader path's albumentations steps: a mosaic with probability ``mosaic`` around a centre drawn
  in [S/2, 3S/2]; affine scale in x and y independently in ``1 +- scale``, translation ``+- translate``
  of the canvas (2S for a mosaic, S for a letterbox; whole pixels, truncated), rotation ``+- degrees``,
  shear ``+- shear``; HSV shifts in ``+- hsv``; flips with their probabilities. A mosaic's three other
  images are drawn among the batch's images (the loader path draws them from the whole data set,
  which costs three more decodes per item; ultralytics draws them from a buffer of recently loaded
  images for the same reason). Boxes go through the same steps and filters as albumentations applies
  them (letterbox: resize, pad, affine; mosaic: tiles cut with
  :func:`~vision_attn.data.det_transforms.place_boxes`, affine on the 2S canvas, centre crop; after
  each: clipped, dropped under ``min_visibility`` of their area or narrower than 2 px), keypoints and
  oriented boxes through :func:`~vision_attn.data.det_transforms.finish_points` as on the loader path.
- :meth:`~DetectionDeviceAugment.images` (on the device): the mosaic canvas assembled from the
  batch's images (slices, no resampling), one bilinear ``grid_sample`` through each image's whole map
  (affine, crop and flips; the constant border grey 114, as ``cv2.warpAffine``'s), the HSV shift in
  OpenCV's uint8 HSV (hue 0..179), rounded to 0..255 after each step, then scaled to [0, 1].

Instance masks (segmentation) are not moved on the device: segmentation keeps ``data.augment: loader``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from vision_attn.data.det_transforms import PAD_VALUE, finish_points, letterbox_params, mosaic_tile, place_boxes, \
    place_points
from vision_attn.data.detection import DetectionDataset, yolo_targets
from vision_attn.errors import ConfigError

__all__ = ["DetectionItems", "DetectionDeviceAugment", "ImagePlan", "affine_matrix", "filter_boxes", "shift_hsv"]

_EPS = 1e-7  # albumentations' tolerance in its box filter


class DetectionItems:
    """The workers' part: ``transform(dataset, index) -> ((S, S, 3) uint8, target)``, the image resized to
    ``img_size`` on its long side (when it is not that size) at the top left of a grey canvas, channels
    last; target: ``boxes`` (n, 4) xyxy and ``labels`` in original pixels, ``image_id``, ``orig_size``,
    the resize ``scale``, ``pad`` (0, 0); with ``keypoints`` (n, K, 3) or ``corners`` (n, 4, 2) in
    original pixels."""

    def __init__(self, img_size: int, *, keypoints: bool = False, obb: bool = False):
        if not (isinstance(img_size, int) and img_size >= 8):
            raise ConfigError(f"img_size={img_size!r}: give a square size in pixels, an int >= 8")
        self.img_size, self.keypoints, self.obb = img_size, keypoints, obb

    def __call__(self, dataset: DetectionDataset, index: int) -> tuple[torch.Tensor, dict[str, Any]]:
        s = self.img_size
        rec = dataset.records[index]
        if self.keypoints or self.obb:
            image, boxes, labels, points = dataset.load_points(index)
        else:
            (image, boxes, labels), points = dataset.load(index), None
        h0, w0 = image.shape[:2]
        scale, (nh, nw), _ = letterbox_params(h0, w0, s)
        if (nh, nw) != (h0, w0):
            image = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_LINEAR)
        if (nh, nw) == (s, s):
            out = np.ascontiguousarray(image)
        else:  # grey where the image is not (only there: the copy is the cost here)
            out = np.empty((s, s, 3), np.uint8)
            out[:nh, :nw] = image
            out[nh:] = PAD_VALUE
            out[:nh, nw:] = PAD_VALUE
        target: dict[str, Any] = {"boxes": torch.from_numpy(np.array(boxes, np.float32).reshape(-1, 4)),
                                  "labels": torch.from_numpy(np.array(labels, np.int64).reshape(-1)),
                                  "image_id": rec.image_id, "orig_size": (h0, w0), "scale": float(scale), "pad": (0, 0)}
        if points is not None:
            target["keypoints" if self.keypoints else "corners"] = torch.from_numpy(np.array(points, np.float32))
        return torch.from_numpy(out), target


def _array(t: torch.Tensor) -> np.ndarray:
    """A float tensor of the batch as float64 NumPy (a bf16-true run's precision converted them already)."""
    return t.detach().double().numpy()


def affine_matrix(size: int, translate: Sequence[float], shear: Sequence[float], scale: Sequence[float],
                  rotate: float) -> np.ndarray:
    """(3, 3) float64: albumentations' ``Affine`` of a ``size`` x ``size`` image in continuous pixel
    coordinates (its ``bbox_matrix``): about the centre, scale, then rotate (degrees), shear (degrees,
    as albumentations passes them), translate (pixels)."""
    c = size / 2
    rot, (shx, shy) = math.radians(rotate % 360), (math.radians(v) for v in shear)
    centre = np.array([[1, 0, c], [0, 1, c], [0, 0, 1]], np.float64)
    m = (np.array([[1, 0, translate[0]], [0, 1, translate[1]], [0, 0, 1]], np.float64)
         @ np.array([[1, math.tan(shx), 0], [math.tan(shy), 1, 0], [0, 0, 1]], np.float64)
         @ np.array([[math.cos(rot), math.sin(rot), 0], [-math.sin(rot), math.cos(rot), 0], [0, 0, 1]], np.float64)
         @ np.diag([scale[0], scale[1], 1.0]))
    return centre @ m @ np.linalg.inv(centre)


def _shift(dx: float, dy: float) -> np.ndarray:
    return np.array([[1, 0, dx], [0, 1, dy], [0, 0, 1]], np.float64)


def filter_boxes(boxes: np.ndarray, width: float, height: float, min_visibility: float,
                 min_size: float) -> tuple[np.ndarray, np.ndarray]:
    """albumentations' box filter after a step: boxes (n, 4) clipped to the image, and which to keep
    (some area before the clip, ``min_visibility`` of it left, at least ``min_size`` px wide and high)."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    c = np.clip(b, 0, [width, height, width, height])
    cw, ch = c[:, 2] - c[:, 0], c[:, 3] - c[:, 1]
    keep = (area >= _EPS) & (cw * ch / (area + _EPS) >= min_visibility) & (cw >= min_size - _EPS) & \
        (ch >= min_size - _EPS)
    return c, keep


def _warp_boxes(boxes: np.ndarray, m: np.ndarray, size: float) -> tuple[np.ndarray, np.ndarray]:
    """Boxes through ``m``: the box enclosing the moved corners (albumentations' "largest_box"), and
    which still reach into the ``size`` x ``size`` image (its ``validate_bboxes``)."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    corners = np.stack([b[:, [0, 1]], b[:, [2, 1]], b[:, [2, 3]], b[:, [0, 3]]], axis=1)  # (n, 4, 2)
    moved = corners @ m[:2, :2].T + m[:2, 2]
    out = np.concatenate([moved.min(1), moved.max(1)], axis=1)
    return out, (out[:, 2] > 0) & (out[:, 3] > 0) & (out[:, 0] < size) & (out[:, 1] < size)


# OpenCV's RGB2HSV_b division tables (12-bit fixed point): hue for the 180 range, saturation
_HDIV = torch.tensor([0] + [round((180 << 12) / (6 * i)) for i in range(1, 256)], dtype=torch.int32)
_SDIV = torch.tensor([0] + [round((255 << 12) / i) for i in range(1, 256)], dtype=torch.int32)


def shift_hsv(x: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """albumentations' ``HueSaturationValue`` of a (B, 3, H, W) RGB batch holding 0..255 integers, per
    image (``shifts`` (B, 3): hue, saturation, value): OpenCV's uint8 HSV (hue 0..179, saturation and value
    0..255, in its fixed-point arithmetic), the hue shifted modulo 180 and truncated, saturation (not of grey
    pixels) and value shifted by whole levels (the shift truncated, as albumentations adds to uint8) and
    clipped, back to RGB (OpenCV's HSV2RGB in float), rounded. Images whose shifts are all 0 are returned
    as they are, as albumentations does."""
    xi = x.to(torch.int32)
    r, g, b = xi.unbind(1)
    v, diff = xi.amax(1), xi.amax(1) - xi.amin(1)
    num = torch.where(v == r, g - b, torch.where(v == g, b - r + 2 * diff, r - g + 4 * diff))
    hue = (num * _HDIV.to(x.device)[diff.long()] + 2048) >> 12
    hue = torch.where(hue < 0, hue + 180, hue)
    sat = (diff * _SDIV.to(x.device)[v.long()] + 2048) >> 12
    per = shifts.to(device=x.device, dtype=torch.float32).view(-1, 3, 1, 1)
    hs, ss, vs = per[:, 0], per[:, 1].trunc(), per[:, 2].trunc()
    hue = torch.remainder(hue.float() + hs, 180).floor_()
    sat = torch.where(sat == 0, 0.0, (sat.float() + ss).clamp_(0, 255))
    val = (v.float() + vs).clamp_(0, 255)
    # HSV -> RGB: channel n (r 5, g 3, b 1) is v (1 - s clamp(min(k, 4 - k), 0, 1)), k = (n + h / 60) mod 6,
    # the sector formula of OpenCV's HSV2RGB written without sectors
    k = torch.remainder(torch.tensor([5.0, 3.0, 1.0], device=x.device).view(1, 3, 1, 1) + (hue / 30).unsqueeze(1), 6)
    f = torch.minimum(k, 4 - k).clamp_(0, 1)
    out = (val.unsqueeze(1) * (1 - (sat / 255).unsqueeze(1) * f)).round_().clamp_(0, 255)
    unshifted = (shifts == 0).all(1).to(x.device).view(-1, 1, 1, 1)
    return torch.where(unshifted, x, out.to(x.dtype))


@dataclass
class ImagePlan:
    """One training image's geometry: ``mosaic`` or a letterbox; ``tiles``: (source image in the batch,
    xa, ya, xb, yb, sx, sy), the canvas window each source fills from its resized image's (sx, sy);
    ``matrix``: canvas -> output in continuous pixels (affine, centre crop and flips); ``canvas``: its
    side (2S mosaic, S letterbox)."""

    mosaic: bool
    tiles: list[tuple[int, int, int, int, int, int, int]]
    matrix: np.ndarray
    canvas: int


class DetectionDeviceAugment:
    """The batch part of ``data.augment: device`` (see the module); the arguments are those of
    :class:`~vision_attn.data.det_transforms.DetectionTransform`. ``flip_idx``: the keypoints' mirror
    points (needed with ``keypoints`` and ``hflip`` > 0)."""

    def __init__(self, img_size: int, *, mosaic: float = 1.0, hflip: float = 0.0, vflip: float = 0.0,
                 scale: float = 0.5, translate: float = 0.1, hsv: Sequence[float] = (5.0, 40.0, 30.0),
                 min_visibility: float = 0.25, degrees: float = 0.0, shear: float = 0.0, keypoints: bool = False,
                 obb: bool = False, flip_idx: Sequence[int] | None = None):
        for name, p in (("mosaic", mosaic), ("hflip", hflip), ("vflip", vflip), ("min_visibility", min_visibility)):
            if not 0 <= p <= 1:
                raise ConfigError(f"{name}={p}: give a probability in [0, 1]")
        if not 0 <= scale < 1 or not 0 <= translate <= 0.5:
            raise ConfigError(f"scale={scale}, translate={translate}: give 0 <= scale < 1 and 0 <= translate <= 0.5")
        if not 0 <= degrees <= 180 or not 0 <= shear < 90:
            raise ConfigError(f"degrees={degrees}, shear={shear}: give 0 <= degrees <= 180 and 0 <= shear < 90")
        if keypoints and hflip > 0 and flip_idx is None:
            raise ConfigError(f"hflip={hflip} with keypoints needs their flip_idx (the data YAML's flip_idx); give "
                              f"it, or set hflip 0")
        self.img_size, self.mosaic, self.flips = img_size, float(mosaic), (float(hflip), float(vflip))
        self.scale, self.translate, self.degrees, self.shear = float(scale), float(translate), float(degrees), float(shear)
        self.hsv, self.min_visibility = tuple(float(v) for v in hsv), float(min_visibility)
        self.keypoints, self.obb, self.flip_idx = keypoints, obb, flip_idx

    def close_mosaic(self) -> None:
        self.mosaic = 0.0

    # ------------------------------------------------------------------ draws
    def draw(self, n: int, seed: int) -> dict[str, torch.Tensor]:
        """The random parameters of ``n`` images from a CPU generator seeded with ``seed``, always in the same
        order: ``mosaic`` (n,) bool, ``centre`` (n, 2), ``partners`` (n, 3), ``translate`` (n, 2) as
        fractions of the canvas, ``shear`` (n, 2) and ``rotate`` (n,) degrees, ``scale`` (n, 2), ``hsv``
        (n, 3), ``flips`` (n, 2) bool (horizontal, vertical)."""
        g = torch.Generator().manual_seed(int(seed))
        s = self.img_size

        def sym(*shape: int) -> torch.Tensor:  # uniform in [-1, 1)
            return torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1

        mosaic = torch.rand(n, generator=g, dtype=torch.float64) < self.mosaic
        centre = torch.randint(s // 2, 3 * s // 2 + 1, (n, 2), generator=g)
        partners = torch.randint(0, n, (n, 3), generator=g)
        translate, shear, scale = sym(n, 2) * self.translate, sym(n, 2) * self.shear, 1 + sym(n, 2) * self.scale
        rotate, hsv = sym(n) * self.degrees, sym(n, 3) * torch.tensor(self.hsv, dtype=torch.float64)
        flips = torch.rand(n, 2, generator=g, dtype=torch.float64) < torch.tensor(self.flips, dtype=torch.float64)
        return {"mosaic": mosaic, "centre": centre, "partners": partners, "translate": translate, "shear": shear,
                "scale": scale, "rotate": rotate, "hsv": hsv, "flips": flips}

    # ------------------------------------------------------------------ targets (CPU)
    def plan(self, batch: dict[str, Any], seed: int) -> tuple[dict[str, Any], list[ImagePlan], torch.Tensor]:
        """A collated batch of :class:`DetectionItems` (on the CPU) -> the batch with its targets augmented
        (``boxes``, ``labels``, ``keypoints`` / ``rboxes``, ``targets``, ``scales``, ``pads``), each image's
        :class:`ImagePlan` and the HSV shifts (B, 3) for :meth:`images`."""
        n = len(batch["boxes"])
        d = self.draw(n, seed)
        s = self.img_size
        plans, boxes_out, labels_out, extra_out, scales, pads = [], [], [], [], [], []
        for i in range(n):
            flips = [name for name, on in zip(("HorizontalFlip", "VerticalFlip"), d["flips"][i].tolist()) if on]
            if bool(d["mosaic"][i]):
                plan, boxes, labels, points, applied = self._mosaic(batch, i, d, s)
                scales.append(1.0)
                pads.append((0, 0))
            else:
                plan, boxes, labels, points, applied, pad = self._letterbox(batch, i, d, s)
                scales.append(float(batch["scales"][i]))
                pads.append(pad)
            flip = np.eye(3)
            for name in flips:
                flip = (np.array([[-1, 0, s], [0, 1, 0], [0, 0, 1]], np.float64) if name == "HorizontalFlip" else
                        np.array([[1, 0, 0], [0, -1, s], [0, 0, 1]], np.float64)) @ flip
                applied.append((name, {"shape": (s, s)}))
            boxes = boxes @ np.diag([flip[0, 0], flip[1, 1]] * 2) + np.array([flip[0, 2], flip[1, 2]] * 2)
            boxes = np.concatenate([np.minimum(boxes[:, :2], boxes[:, 2:]), np.maximum(boxes[:, :2], boxes[:, 2:])], 1)
            plan.matrix = flip @ plan.matrix
            plans.append(plan)
            if points is None:
                boxes_out.append(torch.from_numpy(boxes.astype(np.float32)))
                labels_out.append(torch.from_numpy(labels.astype(np.int64)))
            else:
                done = finish_points(points, boxes, labels, applied, (s, s), keypoints=self.keypoints,
                                     flip_idx=self.flip_idx, train=True, where="the training batch")
                boxes_out.append(done["boxes"])
                labels_out.append(done["labels"])
                extra_out.append(done["keypoints" if self.keypoints else "rboxes"])
        out = {**batch, "boxes": boxes_out, "labels": labels_out, "scales": scales, "pads": pads}
        out.pop("corners", None)
        if self.keypoints or self.obb:
            out["keypoints" if self.keypoints else "rboxes"] = extra_out
            out["targets"] = yolo_targets(out, size=(s, s))
        return out, plans, d["hsv"]

    def _points(self, batch: dict[str, Any], j: int) -> np.ndarray | None:
        key = "keypoints" if self.keypoints else "corners" if self.obb else None
        return None if key is None else _array(batch[key][j])

    def _affine(self, d: dict[str, torch.Tensor], i: int, size: int) -> np.ndarray:
        tx, ty = (int(v * size) for v in d["translate"][i].tolist())  # whole pixels, truncated as albumentations
        return affine_matrix(size, (tx, ty), d["shear"][i].tolist(), d["scale"][i].tolist(), float(d["rotate"][i]))

    def _after_affine(self, boxes: np.ndarray, ids: np.ndarray, m: np.ndarray,
                      size: int) -> tuple[np.ndarray, np.ndarray]:
        moved, inside = _warp_boxes(boxes, m, size)
        moved, ids = moved[inside], ids[inside]
        moved, keep = filter_boxes(moved, size, size, self.min_visibility, 2)
        return moved[keep], ids[keep]

    def _letterbox(self, batch: dict[str, Any], i: int, d: dict[str, torch.Tensor], s: int) -> tuple[Any, ...]:
        h0, w0 = batch["orig_sizes"][i]
        _, (nh, nw), (pl, pt) = letterbox_params(h0, w0, s)
        boxes = np.clip(_array(batch["boxes"][i]), 0, [w0, h0, w0, h0])
        ids = np.arange(len(boxes))
        boxes, keep = filter_boxes(boxes * [nw / w0, nh / h0, nw / w0, nh / h0], nw, nh, self.min_visibility, 2)
        boxes, ids = boxes[keep], ids[keep]
        boxes, keep = filter_boxes(boxes + [pl, pt, pl, pt], s, s, self.min_visibility, 2)
        boxes, ids = boxes[keep], ids[keep]
        m = self._affine(d, i, s)
        boxes, ids = self._after_affine(boxes, ids, m, s)
        points = self._points(batch, i)
        applied = [("LongestMaxSize", {"shape": (h0, w0)}), ("PadIfNeeded", {"shape": (nh, nw), "pad_left": pl,
                                                                             "pad_top": pt}),
                   ("Affine", {"shape": (s, s), "bbox_matrix": m})]
        plan = ImagePlan(False, [(i, pl, pt, pl + nw, pt + nh, 0, 0)], m, s)
        labels = batch["labels"][i].numpy()[ids]
        return plan, boxes, labels, None if points is None else points[ids], applied, (pl, pt)

    def _mosaic(self, batch: dict[str, Any], i: int, d: dict[str, torch.Tensor], s: int) -> tuple[Any, ...]:
        xc, yc = (int(v) for v in d["centre"][i])
        tiles, all_boxes, all_labels, all_points = [], [], [], []
        for k, j in enumerate([i, *(int(v) for v in d["partners"][i])]):
            h0, w0 = batch["orig_sizes"][j]
            r, (h, w), _ = letterbox_params(h0, w0, s)
            xa, ya, xb, yb, sx, sy = mosaic_tile(k, xc, yc, h, w, s)
            tiles.append((j, xa, ya, xb, yb, sx, sy))
            boxes = _array(batch["boxes"][j]).astype(np.float32)
            if len(boxes) == 0:
                continue
            kept, ok = place_boxes(boxes, r, (xa, ya, xb, yb), (sx, sy), self.min_visibility)
            points = self._points(batch, j)
            if points is not None:
                placed = place_points(points, r, xa - sx, ya - sy, (xa, ya, xb, yb))
                ok &= np.array([q is not None for q in placed], bool)
                all_points += [q for q, o in zip(placed, ok) if o]
            all_boxes.append(kept[ok])
            all_labels.append(batch["labels"][j].numpy()[ok])
        boxes = np.concatenate(all_boxes).astype(np.float64) if all_boxes else np.zeros((0, 4))
        labels = np.concatenate(all_labels) if all_labels else np.zeros(0, np.int64)
        ids = np.arange(len(boxes))
        m = self._affine(d, i, 2 * s)
        boxes, ids = self._after_affine(boxes, ids, m, 2 * s)
        half = s // 2  # the centre crop of S out of 2S
        boxes, keep = filter_boxes(boxes - half, s, s, self.min_visibility, 2)
        boxes, ids = boxes[keep], ids[keep]
        applied = [("Affine", {"shape": (2 * s, 2 * s), "bbox_matrix": m}),
                   ("CenterCrop", {"shape": (2 * s, 2 * s), "crop_coords": (half, half, half + s, half + s)})]
        points = None
        if self.keypoints or self.obb:
            tail = tuple(batch["keypoints" if self.keypoints else "corners"][i].shape[1:])
            points = np.array(all_points, np.float32).reshape(-1, *tail)[ids]
        return ImagePlan(True, tiles, _shift(-half, -half) @ m, 2 * s), boxes, labels[ids], points, applied

    # ------------------------------------------------------------------ images (device)
    def images(self, images: torch.Tensor, plans: Sequence[ImagePlan], hsv: torch.Tensor) -> torch.Tensor:
        """(B, S, S, 3) uint8 batch of :class:`DetectionItems` on any device -> (B, 3, S, S) float32 in
        [0, 1]: the mosaic canvas, the warp through each plan's matrix, the HSV shift."""
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[3] != 3:
            raise ConfigError(f"DetectionDeviceAugment takes the (B, S, S, 3) uint8 batch of DetectionItems, got "
                              f"{images.dtype} {tuple(images.shape)}")
        b, s = images.shape[:2]
        images = images.permute(0, 3, 1, 2)  # a view: channels first where the batch now is
        size = max(p.canvas for p in plans)
        canvas = images.new_full((b, 3, size, size), PAD_VALUE)
        inverse = np.zeros((b, 3, 3))
        for i, p in enumerate(plans):
            off = (size - p.canvas) // 2  # a letterbox's S canvas in the middle of a 2S one
            for j, xa, ya, xb, yb, sx, sy in p.tiles:
                canvas[i, :, ya + off:yb + off, xa + off:xb + off] = images[j, :, sy:sy + yb - ya, sx:sx + xb - xa]
            inverse[i] = _shift(off, off) @ np.linalg.inv(p.matrix)
        a = torch.from_numpy(inverse[:, :2]).to(device=images.device, dtype=torch.float32).reshape(b, 6, 1, 1)
        centres = torch.arange(s, device=images.device, dtype=torch.float32) + 0.5  # output pixel centres
        xs, ys = centres.view(1, 1, s), centres.view(1, s, 1)
        grid = torch.stack([(a[:, 0] * xs + a[:, 1] * ys + a[:, 2]) * (2 / size) - 1,
                            (a[:, 3] * xs + a[:, 4] * ys + a[:, 5]) * (2 / size) - 1], -1)
        # grey outside the canvas, as warpAffine's constant border: sample (x - 114) with zeros outside
        out = F.grid_sample(canvas.float() - PAD_VALUE, grid, mode="bilinear", padding_mode="zeros",
                            align_corners=False).add_(PAD_VALUE).round_().clamp_(0, 255)
        if any(self.hsv):
            out = shift_hsv(out, hsv)
        return out.mul_(1 / 255)
