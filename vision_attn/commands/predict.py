"""``vision-attn predict cls|det --checkpoint RUN IMAGES...``: parsing and printing only; the work is
:func:`vision_attn.tasks.predict_images` / :func:`vision_attn.tasks.predict_detections`."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from vision_attn.commands.train import TASK_HELP

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def _predict(args: argparse.Namespace) -> list[dict[str, Any]]:
    from vision_attn.tasks import predict_detections, predict_images

    if args.task == "cls":
        return predict_images(args.checkpoint, args.images, top_k=args.top_k, batch_size=args.batch_size)
    return predict_detections(args.checkpoint, args.images, output=args.output, conf=args.conf, iou=args.iou,
                              batch_size=args.batch_size)


CELLS = {"cls": ("top-{k} (probability)", lambda r: ", ".join(f"{t['label']} ({t['prob']:.3f})" for t in r["top"])),
         "det": ("detections (class score)",
                 lambda r: ", ".join(f"{d['class']} {d['score']:.2f}" for d in r["detections"]) or "-")}


def _cmd_predict(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    results = _predict(args)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    header, cell = CELLS[args.task]
    table = Table()
    table.add_column("image")
    table.add_column(header.format(k=args.top_k))
    for r in results:
        table.add_row(r["image"], cell(r))
    console.print(table)
    if args.output and args.task == "det":
        console.print(f"{len(results)} image(s) with boxes and detections.json written to {args.output}")
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``predict``."""
    p = sub.add_parser("predict", help="predict for images: `predict cls|det --checkpoint RUN IMAGES... [-o OUT]`",
                       description="cls: top-k labels with probabilities; det: boxes with classes and scores (with "
                       "-o OUT: the images with boxes drawn and detections.json). Folders are searched for images.")
    p.add_argument("task", choices=["cls", "det"], help=TASK_HELP)
    p.add_argument("images", nargs="+", help="image files or folders")
    p.add_argument("--checkpoint", required=True, help="a run folder (runs/NAME) or its best.ckpt / last.ckpt")
    p.add_argument("--top-k", type=int, default=5, help="cls: labels per image (default 5)")
    p.add_argument("-o", "--output", default=None, help="det: folder for the images with boxes and detections.json")
    p.add_argument("--conf", type=float, default=0.25, help="det: lowest score of a detection (default 0.25)")
    p.add_argument("--iou", type=float, default=0.7, help="det: IoU of non-maximum suppression (default 0.7)")
    p.add_argument("--batch-size", type=int, default=32, help="images per batch (default 32)")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    p.set_defaults(func=_cmd_predict)
