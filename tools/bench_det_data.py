"""Detection data and evaluation speed: the loader's images/s, and pycocotools against faster-coco-eval.

(1) Images/s of the detection train pipeline on ``demo:digit-boxes`` (PNG decoding, 4-image mosaic,
affine, HSV jitter, letterbox to ``--img-size``; and the val pipeline, letterbox only) through a
DataLoader with 0 and ``--workers`` worker processes, batch 32, one pass over ``--images`` images
(after one warm-up batch). (2) :func:`vision_attn.evaluation.coco_map` with the pycocotools and the
faster-coco-eval backends on the same random case (``--eval-images`` images, about 20 detections and
3 ground-truth boxes each, 10 classes), alternating, ``--rounds`` rounds, medians; the two results are
checked to agree to 1e-6.

    .venv/bin/python tools/bench_det_data.py [--workers 2] [--images 512] [--eval-images 500] [--rounds 5]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch


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
    times: dict[str, list[float]] = {"pycocotools": [], "faster": []}
    results = {}
    for _ in range(rounds):
        for backend in times:
            t0 = time.perf_counter()
            results[backend] = coco_map(gt, det, names=names, category_ids=ids, backend=backend)
            times[backend].append(time.perf_counter() - t0)
    a, b = results["pycocotools"], results["faster"]
    assert abs(a.map - b.map) < 1e-6 and abs(a.map50 - b.map50) < 1e-6, (a.map, b.map)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratios = statistics.median(p / f for p, f in zip(times["pycocotools"], times["faster"]))
    return {"images": n_images, "detections": 20 * n_images, "map": a.map, "map50": a.map50,
            "pycocotools_s": med["pycocotools"], "faster_s": med["faster"], "speedup": ratios}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--img-size", type=int, default=160)
    ap.add_argument("--eval-images", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    out = {}
    for name, split, train in (("train", "train", True), ("val", "val", False)):
        for w in (0, args.workers):
            out[f"{name}_w{w}_img_s"] = round(loader_speed(split, train, w, args.images, args.img_size), 1)
            print(json.dumps({name: {"workers": w, "images/s": out[f"{name}_w{w}_img_s"]}}), flush=True)
    out["eval"] = eval_speed(args.eval_images, args.rounds)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
