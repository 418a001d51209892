"""YOLO txt detection data: a data YAML (``path``, ``train``, ``val``, ``names``), ``images/`` and ``labels/``.

As ultralytics reads it: ``train``/``val`` are folders of images (searched recursively), a ``.txt`` file
listing image paths, or a list of either, relative to ``path`` (itself relative to the YAML's folder;
the YAML's folder when absent). The labels of ``.../images/.../NAME.jpg`` are in
``.../labels/.../NAME.txt``, one box a line: ``class cx cy w h`` normalised to [0, 1] (a polygon
``class x1 y1 x2 y2 ...`` of three or more points gives its enclosing box). ``names`` is a list or a
``{index: name}`` mapping. Checked on load, through the data set's
:class:`~vision_attn.data.faults.Faults` (an error naming the file and line by default, the image
skipped and listed with ``skip_bad_images``): a line with the wrong number of columns, a value that is
not a number, a class index not in 0..nc-1, coordinates outside [0, 1] (pixels written by mistake);
an image that is not one, a broken link. A missing image listed in a ``.txt`` file is an error naming
it. An image without a label file, or with an empty one, is a negative. Boxes partly outside the
image are clipped, degenerate ones dropped, duplicate rows removed (the first kept, as ultralytics
does), each named by file and line in the notes and counted (``dataset.stats``). Image ids are 1..N in
file order; ``category_ids`` are ``index + 1``.

With ``masks=True`` (instance segmentation) every line is a polygon ``class x1 y1 x2 y2 x3 y3 ...``
(normalised, at least 3 points), kept as the instance's shape (pixels) beside its enclosing box. A
problem named by file and line there: fewer than 3 points, an odd number of coordinates, coordinates
outside [0, 1], and a box row (``class cx cy w h``) mixed into the polygons: it is refused, not turned
into its rectangle, since a rectangle is not the object's mask (write the outline, or drop the line).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
from vision_attn.data.detection import (
    DetectionDataset,
    DetectionRecord,
    DetectionStats,
    check_boxes_kept,
)
from vision_attn.data.faults import Faults, image_size, walk_images
from vision_attn.data.keypoints import KeypointSpec, keypoint_spec_from_yaml
from vision_attn.data.rotated import fit_visible
from vision_attn.errors import ConfigError, DataError
from vision_attn.io.text import read_lines
from vision_attn.io.yaml import CONFIG_LIMITS, read_yaml

__all__ = ["YoloDetection", "read_data_yaml", "label_path"]


def read_data_yaml(file: str | Path) -> tuple[dict[str, Any], Path, list[str]]:
    """The data YAML ``file`` as (its mapping, the data root, the class names in index order)."""
    file = Path(file)
    if not file.is_file():
        raise DataError(f"data YAML {file}: no such file; give a YAML with path, train, val and names")
    try:
        doc = read_yaml(file, CONFIG_LIMITS, what="data YAML")
    except ConfigError as e:
        raise DataError(f"data YAML {e}") from None
    if not isinstance(doc, dict):
        raise DataError(f"data YAML {file}: expected a mapping with path, train, val and names")
    if "names" not in doc:
        raise DataError(f"data YAML {file}: 'names' is missing; list the class names (index 0 first)")
    raw = doc["names"]
    if isinstance(raw, dict):
        keys = sorted(raw)
        if keys != list(range(len(keys))):
            raise DataError(f"data YAML {file}: names keys {keys[:10]} should be the class indices 0..{len(keys) - 1}")
        names = [str(raw[k]) for k in keys]
    elif isinstance(raw, list) and raw:
        names = [str(n) for n in raw]
    else:
        raise DataError(f"data YAML {file}: names should be a non-empty list or an {{index: name}} mapping")
    if "nc" in doc and doc["nc"] != len(names):
        raise DataError(f"data YAML {file}: nc is {doc['nc']} but names lists {len(names)} classes; make them agree")
    root = Path(doc.get("path") or ".")
    if not root.is_absolute():
        root = file.parent / root
    return doc, root, names


def label_path(image: Path) -> Path:
    """``.../images/.../NAME.ext`` -> ``.../labels/.../NAME.txt`` (the last ``images`` folder)."""
    parts = list(image.parts)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            break
    return Path(*parts).with_suffix(".txt")


def _list_images(entry: str, root: Path, yaml_file: Path, key: str, faults: Faults) -> list[Path]:
    source = Path(entry) if Path(entry).is_absolute() else root / entry
    if source.is_dir():
        return sorted(Path(p) for p in walk_images(source, faults)[0])
    if source.suffix == ".txt" and source.is_file():
        out = []
        for n, line in read_lines(source, what="image list"):
            line = line.strip()
            if not line:
                continue
            p = Path(line) if Path(line).is_absolute() else (source.parent / line if line.startswith("./") else root / line)
            if not p.is_file():
                raise DataError(f"{source}, line {n}: image {p} not found; put it there or remove the line")
            out.append(p)
        return out
    raise DataError(f"data YAML {yaml_file}: {key}: {source} is neither a folder of images nor a .txt list of them")


COORD_TOLERANCE = 0.01  # normalised coordinates this far outside [0, 1] are clipped, further ones refused


def _polygon_columns(cols: list[str]) -> str | None:
    """Why the columns of a line cannot be a polygon ``class x1 y1 ... xk yk`` (k >= 3); None if they can."""
    coords = len(cols) - 1
    if coords % 2:
        return (f"an odd number of coordinates ({coords}) after the class; a polygon is x y pairs "
                f"(class x1 y1 x2 y2 x3 y3 ...)")
    if coords == 4:
        return ("a box row (class cx cy w h) where the masks need a polygon; box rows are refused, not read as "
                "rectangles (a rectangle is not the object's mask)")
    if coords < 6:
        return f"{coords // 2} point(s); a polygon needs at least 3 (class x1 y1 x2 y2 x3 y3 ...)"
    return None


def _points_columns(cols: list[str], kpt: KeypointSpec | None) -> str | None:
    """Why the columns of a line cannot be a keypoint row (``kpt``) or, without ``kpt``, an oriented box
    ``class x1 y1 x2 y2 x3 y3 x4 y4``; None if they can."""
    if kpt is not None:
        want = 5 + kpt.num * kpt.dims
        if len(cols) != want:
            per = "x y v" if kpt.dims == 3 else "x y"
            return (f"{len(cols)} columns; kpt_shape {kpt.kpt_shape} needs {want} (class cx cy w h, then {kpt.num} "
                    f"points of {per})")
        return None
    if len(cols) != 9:
        points = f"{(len(cols) - 1) // 2} point(s)" if len(cols) % 2 else f"{len(cols) - 1} coordinates (odd)"
        return (f"{points} after the class; an oriented box is its 4 corners (class x1 y1 x2 y2 x3 y3 x4 y4, "
                f"normalised)")
    return None


def _split_points(values: np.ndarray, kpt: KeypointSpec | None) -> tuple[np.ndarray, np.ndarray]:
    """A row's numbers after the class -> (coordinates to check against [0, 1], its points: keypoints
    (K, 3) with visibility, or corners (4, 2))."""
    if kpt is None:
        return values, values.reshape(4, 2)
    pts = values[4:].reshape(kpt.num, kpt.dims)
    if kpt.dims == 2:  # visible unless a coordinate is negative (ultralytics' rule)
        vis = np.where((pts[:, 0] < 0) | (pts[:, 1] < 0), 0.0, 2.0)
        pts = np.concatenate([pts, vis[:, None]], axis=1)
    return np.concatenate([values[:4], pts[:, :2].reshape(-1)]), pts


def _parse_labels(file: Path, nc: int, faults: Faults, stats: DetectionStats, masks: bool = False,
                  kpt: KeypointSpec | None = None, obb: bool = False,
                  ) -> tuple[np.ndarray, np.ndarray, list[str], list[np.ndarray]] | None:
    """Boxes (n, 4) cx, cy, w, h normalised, classes (n,), each row's ``"line N"`` of one label file and,
    with ``masks``, each row's polygon (k, 2) normalised, with ``kpt`` its keypoints (K, 3) (x, y
    normalised, visibility), with ``obb`` its corners (4, 2) normalised (else an empty list); None after
    ``faults.bad`` for a line that cannot be used."""
    boxes, classes, where, polygons = [], [], [], []
    points = kpt is not None or obb
    for n, line in read_lines(file, what="label file"):
        cols = line.split()
        if not cols:
            continue
        at = f"line {n}"
        if points:
            problem = _points_columns(cols, kpt)
            if problem is not None:
                faults.bad(file, problem, at, fix="fix the line")
                return None
        elif masks:
            problem = _polygon_columns(cols)
            if problem is not None:
                faults.bad(file, problem, at, fix="write the instance's outline as a polygon or remove the line")
                return None
        elif len(cols) != 5 and (len(cols) < 7 or len(cols) % 2 == 0):
            faults.bad(file, f"{len(cols)} columns; expected 5 (class cx cy w h, normalised) or a polygon "
                             f"(class x1 y1 x2 y2 x3 y3 ...)", at, fix="fix the line")
            return None
        try:
            cls = float(cols[0])
            values = np.array(cols[1:], dtype=np.float64)
        except ValueError:
            faults.bad(file, f"{line.strip()!r} has a value that is not a number", at, fix="fix the line")
            return None
        if cls != int(cls) or not 0 <= cls < nc:
            faults.bad(file, f"class index {cols[0]} is not in 0..{nc - 1} (the data YAML names {nc} classes)", at,
                       fix="fix the label or add the class to names")
            return None
        checked = values
        if points:
            checked, pts = _split_points(values, kpt)
            if kpt is not None and kpt.dims == 3 and not np.isin(pts[:, 2], (0, 1, 2)).all():
                bad = pts[~np.isin(pts[:, 2], (0, 1, 2)), 2][0]
                faults.bad(file, f"keypoint visibility {bad:g} is not 0, 1 or 2 (0: not labelled, 1: hidden, "
                                 f"2: visible)", at, fix="fix the line")
                return None
        if not np.isfinite(checked).all() or checked.min() < -COORD_TOLERANCE or checked.max() > 1 + COORD_TOLERANCE:
            pixels = np.isfinite(checked).all() and checked.max() > 1.5
            faults.bad(file, f"coordinates {' '.join(cols[1:])} are outside [0, 1]"
                             f"{': they look like pixels' if pixels else ''}", at,
                       fix="YOLO labels are normalised: divide x and width by the image width, y and height by "
                           "its height")
            return None
        if kpt is not None:  # the box is the row's; the points keep their coordinates (rounding clipped)
            pts[:, :2] = np.clip(pts[:, :2], 0.0, 1.0)
            polygons.append(pts)
            values = values[:4]
        elif obb:  # corners cut to the image in their own orientation (rounding outside it)
            fitted = fit_visible(pts, 0.0, 0.0, 1.0, 1.0)
            if fitted is None:
                faults.bad(file, f"the oriented box {' '.join(cols[1:])} has no area", at, fix="fix the line")
                return None
            polygons.append(fitted.astype(np.float64))
            values = polygons[-1].reshape(-1)
        elif masks:  # the outline, inside the image (rounding outside it clipped), and its enclosing box
            polygons.append(np.clip(values, 0.0, 1.0).reshape(-1, 2))
        if len(values) > 4:  # polygon -> enclosing box
            xs, ys = values[0::2], values[1::2]
            if masks or points:
                xs, ys = polygons[-1][:, 0], polygons[-1][:, 1]
            values = np.array([(xs.min() + xs.max()) / 2, (ys.min() + ys.max()) / 2, xs.max() - xs.min(),
                               ys.max() - ys.min()])
            if not masks and not points:
                stats.polygons += 1
                faults.counts["polygons read as boxes"] += 1
        boxes.append(values)
        classes.append(int(cls))
        where.append(at)
    return np.array(boxes, dtype=np.float64).reshape(-1, 4), np.array(classes, dtype=np.int64), where, polygons


class YoloDetection(DetectionDataset):
    """The ``split`` (a key of the data YAML: ``"train"``, ``"val"``, ``"test"``) of a YOLO txt data set;
    ``masks``: read polygon labels as instance shapes (see the module docstring)."""

    def __init__(self, data_yaml: str | Path, split: str = "train", *,
                 transform: Callable[[DetectionDataset, int], Any] | None = None, faults: Faults | None = None,
                 masks: bool = False, keypoints: bool = False, obb: bool = False):
        super().__init__(transform, faults)
        if masks + keypoints + obb > 1:
            raise ConfigError("open a YOLO data set with one of masks, keypoints or obb")
        self.masks, self.obb = masks, obb
        self.data_yaml = Path(data_yaml)
        doc, root, self.names = read_data_yaml(self.data_yaml)
        self.keypoint_spec = keypoint_spec_from_yaml(doc, self.data_yaml) if keypoints else None
        kpt = self.keypoint_spec
        self.category_ids = list(range(1, len(self.names) + 1))
        if not doc.get(split):
            raise DataError(f"data YAML {self.data_yaml}: '{split}' is missing; give the {split} images folder "
                            f"(relative to path: {root})")
        entries = doc[split] if isinstance(doc[split], list) else [doc[split]]
        images = [p for e in entries for p in _list_images(str(e), root, self.data_yaml, split, self.faults)]
        if not images:
            raise DataError(f"data YAML {self.data_yaml}: {split} lists no images ({', '.join(map(str, entries))})")
        stats = DetectionStats()
        nc = len(self.names)
        self.records = []
        for i, path in enumerate(images, start=1):
            size = image_size(path, self.faults)
            if size is None:
                stats.skipped += 1
                continue
            w, h = size
            lp = label_path(path)
            if lp.is_file():
                parsed = _parse_labels(lp, nc, self.faults, stats, masks, kpt, obb)
                if parsed is None:
                    stats.skipped += 1
                    continue
                cxcywh, classes, where, polygons = parsed
            else:
                cxcywh, classes, where, polygons = np.zeros((0, 4)), np.zeros(0, np.int64), [], []
                stats.missing_labels += 1
            half = cxcywh[:, 2:] / 2
            xyxy = (np.concatenate([cxcywh[:, :2] - half, cxcywh[:, :2] + half], axis=1) * [w, h, w, h]).astype(np.float32)
            points = None
            if kpt is not None:
                points = np.array(polygons, np.float32).reshape(-1, kpt.num, 3) * np.float32([w, h, 1])
            elif obb:
                points = np.array(polygons, np.float32).reshape(-1, 4, 2) * np.float32([w, h])
            boxes, labels, kept = check_boxes_kept(xyxy, classes, where, path, h, w, lp, self.faults, stats,
                                                   extra=points)
            shapes = [[(polygons[j] * [w, h]).astype(np.float32)] for j in kept] if masks else None
            self.records.append(DetectionRecord(path, i, h, w, boxes, labels, shapes,
                                                keypoints=points[kept] if kpt is not None else None,
                                                corners=points[kept] if obb else None))
        self.stats = self._finish_stats(stats)

    def __repr__(self) -> str:
        return f"YoloDetection({os.fspath(self.data_yaml)!r}, {len(self)} images, {len(self.names)} classes)"
