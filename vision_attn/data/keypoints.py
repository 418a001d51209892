"""Keypoints of a data set: their layout (``kpt_shape``), left/right pairs (``flip_idx``), names, skeleton
and OKS sigmas, read from a YOLO data YAML or a COCO ``categories`` list and checked once.

YOLO (as ultralytics reads it): ``kpt_shape: [K, 2|3]`` (K points, x y or x y visibility per point),
``flip_idx`` (optional: the point each point becomes under a horizontal flip, a permutation of 0..K-1),
``kpt_names`` (optional: ``{class: [name, ...]}``), ``kpt_oks_sigmas`` (optional: K positive values).
COCO: every category that has ``keypoints`` (names) lists the same K points; ``skeleton`` pairs are
1-based. ``flip_idx`` is then derived from the names (``left_X`` <-> ``right_X``), or given.

Sigmas, as ultralytics' pose validator and loss take them: ``kpt_oks_sigmas`` when given, COCO's 17
person sigmas for ``kpt_shape [17, 3]``, else ``1 / K`` each. Visibility, as COCO: 0 not labelled,
1 labelled but hidden, 2 visible; with ``kpt_shape [K, 2]`` a point is visible (2 is not written) unless
a coordinate is negative (ultralytics' rule), then 0.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from vision_attn.errors import DataError

__all__ = ["KeypointSpec", "COCO_SIGMAS", "COCO_FLIP_IDX", "default_sigmas", "keypoint_spec_from_yaml", "keypoint_spec_from_coco",
           "check_flip_idx", "flip_from_names"]

# COCO's person keypoints (nose, eyes, ears, shoulders, elbows, wrists, hips, knees, ankles): its OKS sigmas
COCO_SIGMAS = np.array([0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79, 0.72, 0.72, 0.62, 0.62, 1.07, 1.07, 0.87, 0.87,
                        0.89, 0.89], np.float64) / 10.0
COCO_FLIP_IDX = (0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15)


@dataclass(frozen=True)
class KeypointSpec:
    """K points of ``dims`` (2: x y; 3: x y visibility) values per instance; ``flip_idx`` (K,) or None (no
    horizontal flip possible), ``sigmas`` (K,) for OKS, point ``names`` and 0-based ``skeleton`` pairs."""

    num: int
    dims: int
    flip_idx: tuple[int, ...] | None = None
    sigmas: tuple[float, ...] = ()
    names: tuple[str, ...] = ()
    skeleton: tuple[tuple[int, int], ...] = field(default_factory=tuple)

    @property
    def kpt_shape(self) -> list[int]:
        return [self.num, self.dims]

    def as_dict(self) -> dict[str, Any]:
        """What a run records (``kpt_shape``, ``flip_idx``, ``kpt_oks_sigmas``, ``kpt_names``, ``skeleton``)."""
        return {"kpt_shape": self.kpt_shape, "flip_idx": list(self.flip_idx) if self.flip_idx else None,
                "kpt_oks_sigmas": list(self.sigmas), "kpt_names": list(self.names),
                "skeleton": [list(p) for p in self.skeleton]}


def default_sigmas(num: int, dims: int) -> tuple[float, ...]:
    """The OKS sigmas of K = ``num`` keypoints of ``dims`` numbers when the data gives none: COCO's for
    (17, 3), else ``1 / K`` each (ultralytics' rule, its validator's and its loss's)."""
    if (num, dims) == (17, 3):
        return tuple(COCO_SIGMAS.tolist())
    return (1.0 / num,) * num


def check_flip_idx(flip_idx: Any, num: int, where: str) -> tuple[int, ...]:
    """``flip_idx`` as a tuple, or a DataError naming ``where`` (the file and key) unless it is a
    permutation of 0..num-1."""
    if not isinstance(flip_idx, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                         for i in flip_idx):
        raise DataError(f"{where}: {flip_idx!r} should be a list of {num} point indices")
    if sorted(flip_idx) != list(range(num)):
        raise DataError(f"{where}: {list(flip_idx)} is not a permutation of 0..{num - 1} (each point's mirror "
                        f"point under a horizontal flip, each index once); fix it, e.g. "
                        f"{list(range(num))} for points without a left/right pair")
    return tuple(flip_idx)


def flip_from_names(names: Sequence[str]) -> tuple[int, ...] | None:
    """The permutation pairing ``left...``/``right...`` names (case-insensitive), others mapped to themselves;
    None when a ``left``/``right`` name has no partner."""
    index = {n.lower(): i for i, n in enumerate(names)}
    out = []
    for n in names:
        low = n.lower()
        other = re.sub(r"left", "\0", low).replace("right", "left").replace("\0", "right")
        if other == low:
            out.append(index[low])
        elif other in index:
            out.append(index[other])
        else:
            return None
    return tuple(out)


def _sigmas(raw: Any, num: int, where: str) -> tuple[float, ...]:
    if not isinstance(raw, (list, tuple)) or len(raw) != num or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in raw):
        raise DataError(f"{where}: {raw!r} should be {num} positive numbers (one OKS sigma per keypoint)")
    return tuple(float(v) for v in raw)


def keypoint_spec_from_yaml(doc: dict[str, Any], file: Path) -> KeypointSpec:
    """The keypoints of a YOLO pose data YAML (``doc``: its mapping; ``file`` named in errors)."""
    raw = doc.get("kpt_shape")
    if (not isinstance(raw, (list, tuple)) or len(raw) != 2 or not all(isinstance(v, int) for v in raw)
            or raw[0] < 1 or raw[1] not in (2, 3)):
        raise DataError(f"data YAML {file}: kpt_shape is {raw!r}; give [number of keypoints, 2 or 3] "
                        f"(2: x y, 3: x y visibility), e.g. kpt_shape: [17, 3]")
    num, dims = int(raw[0]), int(raw[1])
    flip = doc.get("flip_idx")
    flip_idx = check_flip_idx(flip, num, f"data YAML {file}: flip_idx") if flip is not None else None
    sigmas = (_sigmas(doc["kpt_oks_sigmas"], num, f"data YAML {file}: kpt_oks_sigmas")
              if doc.get("kpt_oks_sigmas") is not None else default_sigmas(num, dims))
    names: tuple[str, ...] = ()
    kn = doc.get("kpt_names")
    if isinstance(kn, dict) and kn:
        first = kn[sorted(kn)[0]]
        if isinstance(first, list) and len(first) == num:
            names = tuple(str(n) for n in first)
    skeleton: tuple[tuple[int, int], ...] = ()
    sk = doc.get("skeleton")
    if isinstance(sk, list) and all(isinstance(p, list) and len(p) == 2 and all(isinstance(i, int) and 0 <= i < num
                                                                                for i in p) for p in sk):
        skeleton = tuple((int(a), int(b)) for a, b in sk)
    return KeypointSpec(num, dims, flip_idx, sigmas, names, skeleton)


def keypoint_spec_from_coco(categories: list[Any], file: Path, flip_idx: Sequence[int] | None = None,
                            sigmas: Sequence[float] | None = None) -> KeypointSpec:
    """The keypoints of a COCO keypoints json (``categories`` with ``keypoints`` names and ``skeleton``)."""
    named = [(i, c) for i, c in enumerate(categories) if isinstance(c, dict) and c.get("keypoints")]
    if not named:
        raise DataError(f"{file}: no category lists 'keypoints' (the point names); a COCO keypoints json names "
                        f"them in categories[i].keypoints")
    i0, c0 = named[0]
    names = c0["keypoints"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise DataError(f"{file}: categories[{i0}].keypoints should be a list of point names")
    for i, c in named[1:]:
        if len(c["keypoints"]) != len(names):
            raise DataError(f"{file}: categories[{i}].keypoints names {len(c['keypoints'])} points but "
                            f"categories[{i0}] names {len(names)}; every category needs the same keypoints")
    num = len(names)
    if flip_idx is not None:
        flip = check_flip_idx(list(flip_idx), num, "flip_idx")
    else:
        flip = flip_from_names(names)
    skeleton = []
    for j, pair in enumerate(c0.get("skeleton") or []):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, int) and 1 <= v <= num for v in pair)):
            raise DataError(f"{file}: categories[{i0}].skeleton[{j}] is {pair!r}; give two 1-based point indices "
                            f"in 1..{num}")
        skeleton.append((pair[0] - 1, pair[1] - 1))
    sig = _sigmas(list(sigmas), num, "kpt_oks_sigmas") if sigmas is not None else default_sigmas(num, 3)
    return KeypointSpec(num, 3, flip, sig, tuple(names), tuple(skeleton))
