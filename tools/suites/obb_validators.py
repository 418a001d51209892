"""Oriented-box mAP of two runs by two validators: ours (`eval obb`: COCO matching over the polygons' exact
IoU) and ultralytics' (`YOLO(best.pt).val(...)`: its OBBValidator, matching on ``batch_probiou``).

    python tools/bench.py obb-validators --ours runs/ours_obb --peer runs/ulobb/peer/weights/best.pt \\
        --data ~/.cache/vision_attn/digit-obb-v1/yolo/data.yaml

``--ours``: a vision_attn OBB run (folder or ``best.ckpt``); its weights are loaded into ultralytics' own
model of ``--peer-yaml`` (every state-dict key and shape must match: refused otherwise) and written as
ultralytics' trainer writes a ``best.pt`` (``BaseTrainer.save_model`` then ``strip_optimizer``: fp16), which
ultralytics' validator then reads as its users run it. ``--peer``: an ultralytics ``-obb.pt``, which our
`eval obb` reads. Both validators see the same data YAML at the same image size and batch.

Then the gap is taken apart on one set of detections per run (our pipeline's: square letterbox, ProbIoU
Fast-NMS at 0.7, conf 0.001, up to 300 a image), each scored four ways: {COCOeval's matching and 101-point
AP (ours), ultralytics' ``match_predictions`` + ``ap_per_class``} x {polygon IoU, ``batch_probiou``}. And the
two IoUs are compared on the same pairs: each ground-truth box with the same-class detection (score >= 0.25)
that overlaps it most (polygon IoU >= 0.5), by the box's aspect ratio (short side / long side), with the
angle error. A check (group ``check``): it scores files, it does not time anything.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from tools.suites.harness import Param, Suite


def as_ultralytics_file(run_path: str, peer_yaml: str, folder: Path, data: str) -> Path:
    """Our OBB run's weights written as ultralytics' trainer writes ``best.pt`` (:func:`write_as_ultralytics`)."""
    from vision_attn.tasks.obb.run import load_obb

    run = load_obb(run_path)
    return write_as_ultralytics(run.model, run.classes, run.img_size[0], peer_yaml, folder, data, what=str(run_path))


def write_as_ultralytics(model: torch.nn.Module, classes: list[str], img_size: int, peer_yaml: str, folder: Path,
                         data: str, *, what: str = "the model") -> Path:
    """Our OBB ``model``'s weights in ultralytics' own model of ``peer_yaml`` (every state-dict key and shape
    checked), written as its trainer writes ``folder/best.pt`` (fp16, ``train_args`` with task ``obb``, ``data``
    and ``img_size``)."""
    from tests.io.ultralytics_files import save_model_like_trainer
    from ultralytics.nn.tasks import OBBModel

    peer = OBBModel(peer_yaml, nc=len(classes), verbose=False)
    ours, theirs = model.state_dict(), peer.state_dict()
    wrong = sorted(set(ours) ^ set(theirs)) + [k for k in ours if k in theirs and ours[k].shape != theirs[k].shape]
    if wrong:
        raise SystemExit(f"{what}: its weights do not fit ultralytics' {peer_yaml} ({len(wrong)} keys differ, first "
                         f"{wrong[:3]}); give --peer-yaml the YAML and scale the run was trained with")
    peer.load_state_dict(ours, strict=True)
    return save_model_like_trainer(peer, folder, list(classes), imgsz=img_size, data=data, task="obb")[1]


def ultralytics_val(pt: Path, data: str, img_size: int, batch: int) -> dict[str, float]:
    """ultralytics' validator on ``pt`` as its users run it: ``YOLO(pt).val(data=..., imgsz=..., batch=...)``."""
    from ultralytics import YOLO

    model = YOLO(str(pt))
    if model.task != "obb":  # ultralytics takes the task from the file's train_args: "detect" would score boxes
        raise SystemExit(f"{pt}: ultralytics reads it as a {model.task} model, not obb")
    with tempfile.TemporaryDirectory() as out:
        metrics = model.val(data=data, imgsz=img_size, batch=batch, device="cpu", workers=0, plots=False,
                                    verbose=False, project=out, name="val")
    return {"map50": float(metrics.box.map50), "map": float(metrics.box.map)}


def our_detections(checkpoint: str | Path, data: str, batch: int) -> tuple[Any, list[dict[str, Any]]]:
    """The data set and our pipeline's detections (what `eval obb` scores) of an OBB run or ultralytics -obb.pt."""
    from vision_attn.data import DetectionTransform, open_detection
    from vision_attn.tasks.detect.run import batched
    from vision_attn.tasks.obb.run import load_obb, rotated_of_batch

    run = load_obb(checkpoint)
    dataset = open_detection(data, "val", obb=True, transform=DetectionTransform(run.img_size[0], obb=True))
    dets = batched(run, dataset, rotated_of_batch, batch_size=batch, num_workers=0, conf=0.001, iou=0.7, max_det=300,
                   multi_label=True)
    return dataset, dets


def probiou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ultralytics' ``batch_probiou`` (N, M) of oriented boxes (cx, cy, w, h, r)."""
    from ultralytics.utils.metrics import batch_probiou

    a, b = np.asarray(a, np.float64).reshape(-1, 5), np.asarray(b, np.float64).reshape(-1, 5)
    if not len(a) or not len(b):
        return np.zeros((len(a), len(b)))
    return batch_probiou(torch.from_numpy(a), torch.from_numpy(b)).numpy()


def ultralytics_scoring(truth: list[dict[str, Any]], dets: list[dict[str, Any]], iou, nc: int) -> tuple[float, float]:
    """mAP@.5 and mAP@.5:.95 as ultralytics' validator computes them from per-image detections (its
    ``match_predictions``: greedy by confidence, each detection the best unclaimed target; its ``ap_per_class``:
    the whole set's precision envelope, 101-point interpolation, trapezoid), on the IoU function ``iou``."""
    from ultralytics.engine.validator import BaseValidator
    from ultralytics.utils.metrics import ap_per_class

    matcher = SimpleNamespace(iouv=torch.linspace(0.5, 0.95, 10))
    by_id = {d["image_id"]: d for d in dets}
    tps, confs, pred_cls, target_cls = [], [], [], []
    for g in truth:
        d = by_id[g["image_id"]]
        order = np.argsort(-d["scores"], kind="stable")
        rb, sc, lb = d["rboxes"][order], d["scores"][order], d["labels"][order]
        gl = np.asarray(g["labels"])
        if len(gl) and len(lb):
            tp = BaseValidator.match_predictions(matcher, torch.from_numpy(lb), torch.from_numpy(gl),
                                                 torch.from_numpy(iou(g["rboxes"], rb))).numpy()
        else:
            tp = np.zeros((len(lb), 10), bool)
        tps.append(tp)
        confs.append(sc)
        pred_cls.append(lb)
        target_cls.append(gl)
    out = ap_per_class(np.concatenate(tps), np.concatenate(confs), np.concatenate(pred_cls),
                       np.concatenate(target_cls))
    ap = out[5]  # (classes with targets, 10)
    return float(ap[:, 0].mean()), float(ap.mean())


def coco_scoring(dataset: Any, truth: list[dict[str, Any]], dets: list[dict[str, Any]], iou) -> tuple[float, float]:
    """mAP@.5 and mAP@.5:.95 as `eval obb` computes them (COCOeval), on the IoU function ``iou``."""
    from vision_attn.evaluation import obb_map

    r = obb_map(truth, dets, names=dataset.names, category_ids=dataset.category_ids, iou=iou)
    return float(r.map50), float(r.map)


def long_side_angle(box: np.ndarray) -> float:
    """The direction (radians) of an oriented box's longer side (r is the w side's)."""
    return float(box[4] + (np.pi / 2 if box[3] > box[2] else 0.0))


GEOMETRY = (  # (what, ground truth, detection): cx, cy, w, h, r
    ("square, turned 10 deg", (0, 0, 20, 20, 0), (0, 0, 20, 20, np.radians(10))),
    ("square, turned 45 deg", (0, 0, 20, 20, 0), (0, 0, 20, 20, np.radians(45))),
    ("4:3 box, turned 10 deg", (0, 0, 20, 15, 0), (0, 0, 20, 15, np.radians(10))),
    ("4:3 box, turned 45 deg", (0, 0, 20, 15, 0), (0, 0, 20, 15, np.radians(45))),
    ("2:1 box, turned 10 deg", (0, 0, 20, 10, 0), (0, 0, 20, 10, np.radians(10))),
    ("2:1 box, turned 45 deg", (0, 0, 20, 10, 0), (0, 0, 20, 10, np.radians(45))),
    ("square, moved 10% of its side", (0, 0, 20, 20, 0), (2, 0, 20, 20, 0)),
    ("square, moved 20% of its side", (0, 0, 20, 20, 0), (4, 0, 20, 20, 0)),
    ("square, one side 20% longer", (0, 0, 20, 20, 0), (2, 0, 24, 20, 0)),
    ("2:1 box, both sides 20% longer", (0, 0, 20, 10, 0), (0, 0, 24, 12, 0)),
)


def matched_pairs(truth: list[dict[str, Any]], dets: list[dict[str, Any]], min_score: float = 0.25) -> np.ndarray:
    """(n, 5) per ground-truth box with a same-class detection (score >= ``min_score``) of polygon IoU >= 0.5: the
    most overlapping one's polygon IoU, its probiou, the box's short/long side ratio, the angle error (degrees,
    modulo 180) and the angle error modulo 90."""
    from vision_attn.evaluation.rotated_iou import rotated_iou

    by_id = {d["image_id"]: d for d in dets}
    rows = []
    for g in truth:
        d = by_id[g["image_id"]]
        keep = d["scores"] >= min_score
        rb, lb = d["rboxes"][keep], d["labels"][keep]
        if not len(rb) or not len(g["labels"]):
            continue
        poly = rotated_iou(g["rboxes"], rb) * (np.asarray(g["labels"])[:, None] == lb[None])
        prob = probiou(g["rboxes"], rb)
        for i, j in enumerate(poly.argmax(1)):
            if poly[i, j] >= 0.5:
                gt, dt = g["rboxes"][i], rb[j]
                err = abs((long_side_angle(dt) - long_side_angle(gt) + np.pi / 2) % np.pi - np.pi / 2)
                rows.append((poly[i, j], prob[i, j], min(gt[2:4]) / max(gt[2:4]), np.degrees(err),
                             np.degrees(min(err, np.pi / 2 - err))))
    return np.array(rows).reshape(-1, 5)


def _fmt(x: float) -> str:
    return f"{x:.3f}"


def run(p, record) -> None:
    from tools.ultralytics_env import quiet_ultralytics_environment

    if not (p.ours and p.peer and p.data):
        raise SystemExit("obb-validators: give --ours RUN, --peer BEST_PT and --data DATA_YAML")
    quiet_ultralytics_environment()
    from vision_attn.evaluation.rotated_iou import rotated_iou
    from vision_attn.tasks.obb.run import evaluate_obb

    data = str(Path(p.data).expanduser())
    with tempfile.TemporaryDirectory() as tmp:
        ours_pt = as_ultralytics_file(p.ours, p.peer_yaml, Path(tmp) / "ours", data)
        runs = {"vision_attn run": (p.ours, ours_pt), "ultralytics run": (p.peer, Path(p.peer))}
        rows = []
        for name, (ours_file, peer_file) in runs.items():
            mine = evaluate_obb(ours_file, data, batch_size=p.batch)
            theirs = ultralytics_val(peer_file, data, p.img_size, p.batch)
            row = {"run": name, "ours_map50": mine["map50"], "ours_map": mine["map"],
                   "ultralytics_map50": theirs["map50"], "ultralytics_map": theirs["map"]}
            if name == "vision_attn run":  # the fp16 file ultralytics read, through our reader: what rounding costs
                fp16 = evaluate_obb(ours_pt, data, batch_size=p.batch)
                row.update(ours_fp16_map50=fp16["map50"], ours_fp16_map=fp16["map"])
            rows.append(record.add("table", row))
        record.save()
    record.table(["run", "our validator mAP@.5", "our validator mAP@.5:.95", "ultralytics' validator mAP@.5",
                  "ultralytics' validator mAP@.5:.95"],
                 [[r["run"]] + [_fmt(r[k]) for k in ("ours_map50", "ours_map", "ultralytics_map50", "ultralytics_map")]
                  for r in rows], "The 2x2: each run by each validator")
    if "ours_fp16_map" in rows[0]:
        record.line(f"our run written as ultralytics' fp16 best.pt, read back by our `eval obb`: mAP@.5 "
                    f"{rows[0]['ours_fp16_map50']:.4f}, mAP@.5:.95 {rows[0]['ours_fp16_map']:.4f} (best.ckpt: "
                    f"{rows[0]['ours_map50']:.4f}, {rows[0]['ours_map']:.4f})\n")

    geometry = [record.add("geometry", {"case": what, "polygon_iou": float(rotated_iou(np.array([g]), np.array([d]))[0, 0]),
                                        "probiou": float(probiou(np.array([g]), np.array([d]))[0, 0])})
                for what, g, d in GEOMETRY]
    record.table(["case", "polygon IoU", "probiou"], [[r["case"], _fmt(r["polygon_iou"]), _fmt(r["probiou"])]
                                                      for r in geometry], "One box against its ground truth")
    parts, pair_rows = [], []
    bins = [(0.0, 0.7), (0.7, 0.85), (0.85, 1.01)]
    for name, (ours_file, peer_file) in runs.items():
        dataset, dets = our_detections(ours_file if name == "vision_attn run" else peer_file, data, p.batch)
        truth = dataset.ground_truth()
        scores = {}
        for scorer in ("coco", "ultralytics"):
            for iou_name, iou in (("polygon", rotated_iou), ("probiou", probiou)):
                scores[scorer, iou_name] = (coco_scoring(dataset, truth, dets, iou) if scorer == "coco" else
                                            ultralytics_scoring(truth, dets, iou, len(dataset.names)))
        parts.append(record.add("decomposition", {"run": name, **{f"{s}_{i}": v for (s, i), v in scores.items()}}))
        pairs = matched_pairs(truth, dets)
        for lo, hi in bins:
            sel = pairs[(pairs[:, 2] >= lo) & (pairs[:, 2] < hi)]
            if not len(sel):
                continue
            pair_rows.append(record.add("pairs", {
                "run": name, "aspect": f"{lo:.2f}-{min(hi, 1.0):.2f}", "pairs": len(sel),
                "polygon_iou": sel[:, 0].mean(), "probiou": sel[:, 1].mean(),
                "probiou_minus_polygon": (sel[:, 1] - sel[:, 0]).mean(),
                "at_75_probiou_only": float(((sel[:, 1] >= 0.75) & (sel[:, 0] < 0.75)).mean()),
                "at_75_polygon_only": float(((sel[:, 0] >= 0.75) & (sel[:, 1] < 0.75)).mean()),
                "angle_err_deg": float(np.median(sel[:, 3])), "angle_err_mod90_deg": float(np.median(sel[:, 4]))}))
        record.save()
    record.table(["run", "COCO, polygon IoU (= `eval obb`)", "COCO, probiou", "ultralytics' AP, polygon IoU",
                  "ultralytics' AP, probiou"],
                 [[r["run"]] + [f"{r[f'{s}_{i}'][0]:.3f} / {r[f'{s}_{i}'][1]:.3f}"
                                for s, i in (("coco", "polygon"), ("coco", "probiou"), ("ultralytics", "polygon"),
                                             ("ultralytics", "probiou"))] for r in parts],
                 "The same detections (our pipeline's) scored four ways, mAP@.5 / mAP@.5:.95")
    record.table(["run", "short/long side", "pairs", "mean polygon IoU", "mean probiou", "probiou - polygon",
                  ">= .75 by probiou only", ">= .75 by polygon only", "median long-side angle error", "median, modulo 90"],
                 [[r["run"], r["aspect"], r["pairs"], _fmt(r["polygon_iou"]), _fmt(r["probiou"]),
                   f"{r['probiou_minus_polygon']:+.3f}", f"{r['at_75_probiou_only']:.1%}",
                   f"{r['at_75_polygon_only']:.1%}", f"{r['angle_err_deg']:.1f} deg",
                   f"{r['angle_err_mod90_deg']:.1f} deg"] for r in pair_rows],
                 "The two IoUs on the same pairs (each true box and its best same-class detection, score >= 0.25)")


SUITE = Suite("obb-validators", "OBB runs by two validators: `eval obb` (polygon IoU) against ultralytics' (probiou)",
              run, (
                  Param("ours", "", "a vision_attn OBB run folder or best.ckpt"),
                  Param("peer", "", "an ultralytics -obb best.pt"),
                  Param("data", "", "the YOLO-OBB data YAML both validators read (the one ultralytics trained on)"),
                  Param("peer_yaml", "yolov8n-obb.yaml", "ultralytics' model YAML (with scale) of the --ours run"),
                  Param("img_size", 160, "validation image size"),
                  Param("batch", 32, "validation batch"),
              ), group="check", requires=("ultralytics",), doc=__doc__)
