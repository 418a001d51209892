"""``vision-attn eval TASK --checkpoint RUN --data PATH``: parsing and printing only; the work is the
task's ``Task.evaluate`` (e.g. :func:`vision_attn.tasks.evaluate_classifier`) and its table the task's
``Task.eval_listing``."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from vision_attn.commands._runtime import add_runtime_argument, runtime_of
from vision_attn.commands.train import TASK_HELP, TASK_NAMES

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def listing_table(listing: Any) -> Table:
    """A task's :class:`~vision_attn.tasks.task.Listing` as a rich table (the first column left-aligned)."""
    from rich.table import Table

    table = Table(title=listing.title)
    for i, col in enumerate(listing.columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in listing.rows:
        table.add_row(*row)
    return table


def _cmd_eval(args: argparse.Namespace, console: Console) -> int:
    from vision_attn.errors import ConfigError
    from vision_attn.tasks import get_task
    from vision_attn.tasks.task import Options

    task = get_task(args.task)
    if task.evaluate is None or task.eval_listing is None:
        raise ConfigError(f"eval {task.name}: the {task.name} task does not evaluate runs; its record (Task.evaluate, "
                          "Task.eval_listing) must give the evaluation")
    report = task.evaluate(args.checkpoint, args.data, Options(batch_size=args.batch_size, num_workers=args.workers),
                           runtime_of(args))
    report["runtime"] = args.runtime
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "table"}, indent=2))
        return 0
    listing = task.eval_listing(report)
    console.print(listing_table(listing))
    console.print(listing.line + ("" if args.runtime == "torch" else f" ({args.runtime})"))
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``eval``."""
    p = sub.add_parser("eval", help=f"evaluate a trained run: `eval {'|'.join(TASK_NAMES)} --checkpoint RUN --data PATH`",
                       description="cls: top-1, top-5 and per-class accuracy of a run's checkpoint on a folder "
                       "(its val/ folder when it has one) or demo:NAME. det: COCO mAP@[.5:.95], mAP@.5 and "
                       "per-class AP on the val split of a COCO folder, a YOLO data YAML or demo:digit-boxes. seg: box "
                       "and mask mAP on data with instance masks (demo:digit-masks, COCO segmentations, YOLO polygons).")
    p.add_argument("task", help=TASK_HELP)
    p.add_argument("--checkpoint", required=True, help="a run folder (runs/NAME) or its best.ckpt / last.ckpt")
    p.add_argument("--data", required=True, help="a folder of class folders, a root with val/, or demo:digits")
    p.add_argument("--batch-size", type=int, default=64, help="images per batch (default 64)")
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (default 0)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    add_runtime_argument(p, calibrates=True)
    p.set_defaults(func=_cmd_eval)
