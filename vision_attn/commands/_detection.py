"""The ``det`` task of ``vision-attn train|eval|predict`` (cli.py's parsers dispatch here): parsing
and printing only, the work is :mod:`vision_attn.tasks`' ``train_detector``, ``evaluate_detector``
and ``predict_detections``."""
from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

__all__ = ["train_det", "eval_det", "predict_det"]


def train_det(args: argparse.Namespace, console: Console) -> int:
    """``vision-attn train det --config configs/detect/NAME.yaml [--section.key value ...]``."""
    from vision_attn.tasks.config import PRINT_CONFIG_FLAGS, build_train_parser, dump_config, parse_train_config
    from vision_attn.tasks.det_train import train_detector

    rest = list(args.args)
    if any(a in ("-h", "--help") for a in rest):
        build_train_parser("det").print_help()
        return 0
    printing = any(a in PRINT_CONFIG_FLAGS for a in rest)
    cfg = parse_train_config([a for a in rest if a not in PRINT_CONFIG_FLAGS], "det")
    if printing:
        print(dump_config(cfg, task="det"), end="")
        return 0
    result = train_detector(cfg, echo=lambda line: console.print(line, markup=False))
    if result.metrics:
        m = result.metrics
        fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
        console.print(f"[bold]final val mAP@.5: {fmt(m['val_map50'])}, mAP@[.5:.95]: {fmt(m['val_map'])}[/bold] "
                      f"({m['model']} {m['scale'] or ''}, {m['epochs']} epochs, {m['wall_time_s']:.0f} s, "
                      f"{m['params'] / 1e6:.2f} M params, {m['gflops']:.2f} GFLOPs)")
        console.print(f"run folder: {result.run_dir}")
    return 0


def eval_det(args: argparse.Namespace, console: Console) -> int:
    """``vision-attn eval det --checkpoint CKPT --data PATH``: COCO mAP and per-class AP."""
    from vision_attn.tasks.det_inference import evaluate_detector

    report = evaluate_detector(args.checkpoint, args.data, split=getattr(args, "split", "val"),
                               batch_size=args.batch_size, num_workers=args.workers)
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "table"}, indent=2))
        return 0
    table = Table(title=f"{report['checkpoint']} on {report['data']} ({report['split']}, {report['images']} images)")
    for col in ("class", "boxes", "AP@[.5:.95]", "AP@.5"):
        table.add_column(col, justify="left" if col == "class" else "right")
    for name, row in report["per_class"].items():
        ap = "n/a" if row["ap"] is None or row["ap"] != row["ap"] else f"{row['ap']:.3f}"
        ap50 = "n/a" if row["ap50"] is None or row["ap50"] != row["ap50"] else f"{row['ap50']:.3f}"
        table.add_row(name, str(row["boxes"]), ap, ap50)
    console.print(table)
    console.print(f"mAP@[.5:.95] {report['map']:.4f}, mAP@.5 {report['map50']:.4f}")
    return 0


def predict_det(args: argparse.Namespace, console: Console) -> int:
    """``vision-attn predict det --checkpoint CKPT IMAGES... -o OUT``: images with boxes and a JSON."""
    from vision_attn.tasks.det_inference import predict_detections

    results = predict_detections(args.checkpoint, args.images, output=args.output, conf=args.conf, iou=args.iou,
                                 batch_size=args.batch_size)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    table = Table()
    table.add_column("image")
    table.add_column("detections (class score)")
    for r in results:
        table.add_row(r["image"], ", ".join(f"{d['class']} {d['score']:.2f}" for d in r["detections"]) or "-")
    console.print(table)
    if args.output:
        console.print(f"{len(results)} image(s) with boxes and detections.json written to {args.output}")
    return 0
