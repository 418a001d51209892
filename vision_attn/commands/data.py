"""``vision-attn data check PATH [--task cls|det] [--json]``: every problem of a data set, its class
counts and image sizes, without training (parsing and printing only; see vision_attn.data.check)."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

MAX_NOTES = 20  # changes printed in the table view (--json lists them all)


def _cmd_data(args: argparse.Namespace, console: Console) -> int:
    from rich.console import Console as RichConsole
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from vision_attn.data.check import check_data

    err = RichConsole(stderr=True, highlight=False)
    with Progress(TextColumn("decoding {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=args.json or not err.is_terminal) as bar:
        tasks: dict[str, int] = {}

        def progress(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total)
            bar.update(tasks[what], completed=done)

        report = check_data(args.path, args.task, fmt=args.format, threads=args.threads, progress=progress)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 0 if report.ok else 2
    for split, line in report.details.items():
        console.print(f"{split}: {line}", markup=False)
    table = Table(title=f"{'images' if report.task == 'cls' else 'boxes'} per class")
    table.add_column("class")
    for split in report.per_class:
        table.add_column(split, justify="right")
    for name in report.classes:
        table.add_row(name, *(str(counts.get(name, 0)) for counts in report.per_class.values()))
    console.print(table)
    sizes = report.size_stats()
    if sizes:
        console.print("image sizes: " + "; ".join(f"{axis} {s['min']}-{s['max']} (median {s['median']:g})"
                                                  for axis, s in sizes.items()), markup=False)
    faults = report.faults
    notes = faults.notes
    if notes:
        console.print(f"{len(notes)} change(s) training makes ({faults.changes()}):", markup=False)
        for p in notes[:MAX_NOTES]:
            console.print(f"  {p.text()}", markup=False, soft_wrap=True)
        if len(notes) > MAX_NOTES:
            console.print(f"  ... and {len(notes) - MAX_NOTES} more (--json lists them all)", markup=False)
    if report.ok:
        console.print("no problems: training reads every file", markup=False)
        return 0
    console.print(f"{len(faults.problems)} problem(s) that stop training (or are skipped with "
                  f"--data.skip_bad_images true):", markup=False)
    for p in faults.problems:
        console.print(f"  {p.text()}", markup=False, soft_wrap=True)
    return 2


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``data``."""
    p = sub.add_parser("data", help="check a data set before training: `data check PATH`",
                       description="Read a whole data set once with the checks training runs (every image decoded, "
                       "every label line read) and list every problem with its file and line, the changes training "
                       "makes (clipped, degenerate, duplicate boxes), class counts and image sizes. Exit status 2 "
                       "when a problem would stop training.")
    p.add_argument("action", choices=["check"], help="check: report the data set's problems")
    p.add_argument("path", help="a classification root (train/ and val/ class folders, or one folder of class "
                   "folders), a YOLO data YAML or its folder, a COCO folder, or demo:digits / demo:digit-boxes")
    p.add_argument("--task", default="auto", choices=["auto", "cls", "det"],
                   help="what the data is for (default: det for a data YAML or COCO folder, else cls)")
    p.add_argument("--format", default="auto", choices=["auto", "coco", "yolo"],
                   help="detection: which copy of a folder that has both (default auto)")
    p.add_argument("--threads", type=int, default=None, help="decoding threads (default: the CPUs)")
    p.add_argument("--json", action="store_true", help="print the whole report as JSON")
    p.set_defaults(func=_cmd_data)
