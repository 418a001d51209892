"""Detection data and evaluation speed: the loader's images/s, and pycocotools against faster-coco-eval.

(1) Images/s of the detection train pipeline on ``demo:digit-boxes`` (PNG decoding, 4-image mosaic,
affine, HSV jitter, letterbox to ``--img-size``; and the val pipeline, letterbox only) through a
DataLoader with 0 and ``--workers`` worker processes, batch 32, one pass over ``--images`` images
(after one warm-up batch). (2) :func:`vision_attn.evaluation.coco_map` with the pycocotools and the
faster-coco-eval backends on the same random case (``--eval-images`` images, about 20 detections and
3 ground-truth boxes each, 10 classes), alternating, ``--rounds`` rounds, medians; the two results are
checked to agree to 1e-6.

    python tools/bench.py det-data   # --workers 2 --images 512 --img-size 160 --eval-images 500 --rounds 5
"""
from __future__ import annotations

import time

import numpy as np
import torch

from tools.suites.harness import Param, Suite, alternate, median, median_ratio


def loader_speed(split: str, train: bool, workers: int, images: int, img_size: int) -> float:
    from vision_attn.data import (
        DetectionTransform,
        collate_detection,
        open_detection,
        seed_worker,
    )

    ds = open_detection("demo:digit-boxes", split, transform=DetectionTransform(img_size, train=train, seed=0))
    ds.records = ds.records[:images]
    loader = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=train, num_workers=workers,
                                         collate_fn=collate_detection, worker_init_fn=seed_worker if workers else None)
    it = iter(loader)
    next(it)  # warm-up: worker start, first decodes
    n, t0 = 0, time.perf_counter()
    for batch in it:
        n += len(batch["images"])
    return n / (time.perf_counter() - t0)


def random_case(n_images: int, nc: int = 10, seed: int = 0) -> tuple[list[dict], list[dict]]:
    rng = np.random.default_rng(seed)
    gt, det = [], []
    for i in range(1, n_images + 1):
        n = int(rng.integers(1, 6))
        xy = rng.uniform(0, 600, (n, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(10, 100, (n, 2))], 1)
        labels = rng.integers(0, nc, n)
        gt.append({"image_id": i, "boxes": boxes, "labels": labels, "orig_size": (720, 720)})
        m = 20
        src = rng.integers(0, n, m)
        dboxes = boxes[src] + rng.normal(0, 8, (m, 4))
        dboxes[:, 2:] = np.maximum(dboxes[:, 2:], dboxes[:, :2] + 1)
        dlabels = np.where(rng.random(m) < 0.7, labels[src], rng.integers(0, nc, m))
        det.append({"image_id": i, "boxes": dboxes, "scores": rng.random(m), "labels": dlabels})
    return gt, det


def eval_speed(n_images: int, rounds: int) -> dict:
    from vision_attn.evaluation import coco_map

    gt, det = random_case(n_images)
    names, ids = [str(k) for k in range(10)], list(range(1, 11))
    results = {}

    def evaluate(backend: str) -> None:
        results[backend] = coco_map(gt, det, names=names, category_ids=ids, backend=backend)

    times = alternate({b: (lambda b=b: evaluate(b)) for b in ("pycocotools", "faster")}, rounds)
    a, b = results["pycocotools"], results["faster"]
    assert abs(a.map - b.map) < 1e-6 and abs(a.map50 - b.map50) < 1e-6, (a.map, b.map)
    return {"images": n_images, "detections": 20 * n_images, "map": a.map, "map50": a.map50,
            "pycocotools_s": median(times["pycocotools"]), "faster_s": median(times["faster"]),
            "speedup": median_ratio(times, "pycocotools", "faster")}


def run(p, record) -> None:
    out = record.results
    lines = []
    for name, split, train in (("train", "train", True), ("val", "val", False)):
        for w in sorted({0, p.workers}):
            out[f"{name}_w{w}_img_s"] = round(loader_speed(split, train, w, p.images, p.img_size), 1)
            lines.append([name, w, out[f"{name}_w{w}_img_s"]])
    record.table(["pipeline", "workers", "images/s"], lines)
    e = out["eval"] = eval_speed(p.eval_images, p.rounds)
    record.line(f"coco_map of {e['images']} images, {e['detections']} detections: pycocotools {e['pycocotools_s']:.2f} s, "
                f"faster-coco-eval {e['faster_s']:.2f} s ({e['speedup']:.2f}x); mAP {e['map']:.4f}")


SUITE = Suite("det-data", "the detection loader's images/s; COCO mAP with pycocotools against faster-coco-eval", run, (
    Param("workers", 2, "loader processes (and 0)", quick=0),
    Param("images", 512, "images a pass", quick=33),
    Param("img_size", 160, "letterbox size", quick=64),
    Param("eval_images", 500, "images of the mAP case", quick=10),
    Param("rounds", 5, "alternating mAP rounds", quick=1),
), doc=__doc__)
