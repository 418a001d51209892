"""``vision-attn eval cls|det|seg --checkpoint RUN --data PATH``: parsing and printing only; the work is
:func:`vision_attn.tasks.evaluate_classifier` / :func:`vision_attn.tasks.evaluate_detector`."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from vision_attn.commands._runtime import add_runtime_argument, runtime_of
from vision_attn.commands.train import TASK_HELP, TASK_NAMES

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or v != v else f"{v:.3f}"


def _table_cls(report: dict[str, Any]) -> tuple[Table, str]:
    from rich.table import Table

    table = Table(title=f"{report['model']} on {report['data']} ({report['images']} images)")
    table.add_column("class")
    table.add_column("images", justify="right")
    table.add_column("accuracy", justify="right")
    for name, acc in report["per_class_accuracy"].items():
        table.add_row(name, str(report["per_class_images"][name]), "n/a" if acc is None else f"{100 * acc:.1f}%")
    return table, f"top-1 {100 * report['top1']:.2f}%, top-5 {100 * report['top5']:.2f}%"


def _table_det(report: dict[str, Any]) -> tuple[Table, str]:
    from rich.table import Table

    table = Table(title=f"{report['checkpoint']} on {report['data']} ({report['split']}, {report['images']} images)")
    for col in ("class", "boxes", "AP@[.5:.95]", "AP@.5"):
        table.add_column(col, justify="left" if col == "class" else "right")
    for name, row in report["per_class"].items():
        table.add_row(name, str(row["boxes"]), _fmt(row["ap"]), _fmt(row["ap50"]))
    return table, f"mAP@[.5:.95] {report['map']:.4f}, mAP@.5 {report['map50']:.4f}"


def _table_seg(report: dict[str, Any]) -> tuple[Table, str]:
    from rich.table import Table

    table = Table(title=f"{report['checkpoint']} on {report['data']} ({report['split']}, {report['images']} images)")
    for col in ("class", "instances", "box AP@[.5:.95]", "box AP@.5", "mask AP@[.5:.95]", "mask AP@.5"):
        table.add_column(col, justify="left" if col == "class" else "right")
    for name, row in report["per_class"].items():
        mask = report["per_class_mask"][name]
        table.add_row(name, str(row["boxes"]), _fmt(row["ap"]), _fmt(row["ap50"]), _fmt(mask["ap"]), _fmt(mask["ap50"]))
    return table, (f"box mAP@[.5:.95] {report['map']:.4f}, mAP@.5 {report['map50']:.4f}; mask mAP@[.5:.95] "
                   f"{report['mask_map']:.4f}, mAP@.5 {report['mask_map50']:.4f}")


TABLES = {"cls": _table_cls, "det": _table_det, "seg": _table_seg}


def _cmd_eval(args: argparse.Namespace, console: Console) -> int:
    from vision_attn.tasks import evaluate_classifier, evaluate_detector, evaluate_segmenter

    evaluate = {"cls": evaluate_classifier, "det": evaluate_detector, "seg": evaluate_segmenter}[args.task]
    report = evaluate(args.checkpoint, args.data, batch_size=args.batch_size, num_workers=args.workers,
                      runtime=runtime_of(args))
    report["runtime"] = args.runtime
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "table"}, indent=2))
        return 0
    table, line = TABLES[args.task](report)
    console.print(table)
    console.print(line + ("" if args.runtime == "torch" else f" ({args.runtime})"))
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``eval``."""
    p = sub.add_parser("eval", help="evaluate a trained run: `eval cls|det|seg --checkpoint RUN --data PATH`",
                       description="cls: top-1, top-5 and per-class accuracy of a run's checkpoint on a folder "
                       "(its val/ folder when it has one) or demo:NAME. det: COCO mAP@[.5:.95], mAP@.5 and "
                       "per-class AP on the val split of a COCO folder, a YOLO data YAML or demo:digit-boxes. seg: box "
                       "and mask mAP on data with instance masks (demo:digit-masks, COCO segmentations, YOLO polygons).")
    p.add_argument("task", choices=TASK_NAMES, help=TASK_HELP)
    p.add_argument("--checkpoint", required=True, help="a run folder (runs/NAME) or its best.ckpt / last.ckpt")
    p.add_argument("--data", required=True, help="a folder of class folders, a root with val/, or demo:digits")
    p.add_argument("--batch-size", type=int, default=64, help="images per batch (default 64)")
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (default 0)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    add_runtime_argument(p, calibrates=True)
    p.set_defaults(func=_cmd_eval)
