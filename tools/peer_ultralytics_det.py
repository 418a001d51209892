"""Benchmark-only peer run: ultralytics' own trainer on the same generated detection (or segmentation) data.

ultralytics is AGPL and never a dependency of vision_attn: run this in a separate environment that has
it (and vision_attn, only to materialise the data), e.g.::

    python -m venv /tmp/ulvenv && /tmp/ulvenv/bin/pip install -c constraints.txt -e . ultralytics
    /tmp/ulvenv/bin/python tools/peer_ultralytics_det.py --epochs 14 --img-size 160 --batch 32

A -seg YAML (``--model yolov8n-seg.yaml``, ``yolo11n-seg.yaml``) trains ultralytics' segmentation trainer on
``demo:digit-masks`` (the same canvases, each digit's outline its polygon) and reports mask mAP beside box mAP.
A -pose YAML (``yolov8n-pose.yaml``) trains its pose trainer on ``demo:digit-keypoints`` (each digit's four
corners, ``kpt_shape [4, 3]``) and reports keypoint mAP (OKS) beside box mAP; an -obb YAML
(``yolov8n-obb.yaml``) its OBB trainer on ``demo:digit-obb`` (rotated digits), whose box mAP is the
oriented boxes'.

An RT-DETR YAML (``--model rtdetr-s.yaml``: our small one from configs/models/, which ultralytics builds
from the same rows; or ``rtdetr-l.yaml``) trains ultralytics' RT-DETR trainer (``RTDETR(yaml).train``).

It trains one of ultralytics' own detection YAMLs (``--model yolov8n.yaml``, ``yolo11n.yaml``,
``yolo12n.yaml``, ``yolo26n.yaml``: the scale letter in the name, from scratch) on ``demo:digit-boxes``
in the YOLO txt layout, with the epochs, image size and batch of our config, horizontal flips off
(flipped digits are other glyphs; our config does not flip either), and prints one JSON line:
parameters, ultralytics' own GFLOPs figure at the training size (its thop count), mAP@.5, mAP@.5:.95
of the final model on the val split, the training wall time and the seconds per epoch (training and
ultralytics' per-epoch validation together, from its ``results.csv``).
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from ultralytics_env import quiet_ultralytics_environment  # tools/, the script's folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="demo:digit-boxes (default; demo:digit-masks for a -seg YAML) or a "
                    "YOLO data YAML")
    ap.add_argument("--model", default="yolov8n.yaml",
                    help="an ultralytics detection YAML by name, scale letter included: yolov8n.yaml, yolo11n.yaml, "
                         "yolo12n.yaml, yolo26n.yaml (default yolov8n.yaml)")
    ap.add_argument("--epochs", type=int, default=14)
    ap.add_argument("--img-size", type=int, default=160)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the JSON line to this file too")
    ap.add_argument("--project", default=None, help="ultralytics' run folder goes to PROJECT/peer (its weights/best.pt "
                    "and last.pt); default a new temporary folder")
    args = ap.parse_args()

    quiet_ultralytics_environment()
    stem = Path(args.model).stem
    segment, pose = "-seg" in stem, "-pose" in stem
    data = args.data or ("demo:digit-masks" if segment else "demo:digit-keypoints" if pose
                         else "demo:digit-obb" if "-obb" in stem else "demo:digit-boxes")
    if data.startswith("demo:"):
        from vision_attn.data.demo import materialise

        data = str(materialise(data.removeprefix("demo:")) / "yolo" / "data.yaml")

    from ultralytics import RTDETR, YOLO
    from ultralytics.utils.torch_utils import get_flops

    project = str(Path(args.project).resolve()) if args.project else tempfile.mkdtemp(prefix="ultralytics-run-")
    ours = Path(__file__).resolve().parents[1] / "configs" / "models" / args.model  # rtdetr-s.yaml is ours
    source = str(ours) if not Path(args.model).exists() and ours.is_file() else args.model
    model = (RTDETR if Path(args.model).stem.startswith("rtdetr") else YOLO)(source)
    start = time.perf_counter()
    model.train(data=data, epochs=args.epochs, imgsz=args.img_size, batch=args.batch, workers=args.workers,
                device="cpu", pretrained=False, amp=False, plots=False, fliplr=0.0, project=project,
                name="peer", exist_ok=True, seed=args.seed, verbose=False)
    wall = time.perf_counter() - start
    metrics = model.val(data=data, imgsz=args.img_size, batch=args.batch, device="cpu", plots=False,
                        project=project, name="val", verbose=False)
    n_params = sum(p.numel() for p in model.model.parameters())
    row = {"peer": f"ultralytics {args.model}", "epochs": args.epochs, "img_size": args.img_size,
           "batch": args.batch, "params": n_params, "gflops": round(get_flops(model.model, args.img_size), 3),
           "map50": float(metrics.box.map50), "map": float(metrics.box.map),
           **({"mask_map50": float(metrics.seg.map50), "mask_map": float(metrics.seg.map)} if segment else {}),
           **({"kpt_map50": float(metrics.pose.map50), "kpt_map": float(metrics.pose.map)} if pose else {}),
           "train_seconds": round(wall, 1),
           "seconds_per_epoch": round(wall / args.epochs, 1), "run": str(Path(project) / "peer"),
           "curve": per_epoch(Path(project) / "peer" / "results.csv")}
    line = json.dumps(row)
    print(line)
    if args.out:
        Path(args.out).write_text(line + "\n")


def per_epoch(results: Path) -> list[dict[str, float]]:
    """ultralytics' validation of each epoch (its results.csv): epoch, mAP@.5 and mAP@.5:.95 of the boxes (and
    of the keypoints, for a pose run)."""
    import csv

    if not results.is_file():
        return []
    with results.open() as f:
        rows = [{k.strip(): v for k, v in row.items()} for row in csv.DictReader(f)]
    return [{"epoch": int(float(r["epoch"])), "map50": round(float(r["metrics/mAP50(B)"]), 4),
             "map": round(float(r["metrics/mAP50-95(B)"]), 4),
             **({"kpt_map50": round(float(r["metrics/mAP50(P)"]), 4),
                 "kpt_map": round(float(r["metrics/mAP50-95(P)"]), 4)} if "metrics/mAP50(P)" in r else {})} for r in rows]


if __name__ == "__main__":
    main()
