"""``vision-attn data check PATH [--task cls|det] [--json]``: every problem of a data set, its class
counts and image sizes, without training (see vision_attn.data.check); ``vision-attn data pack FOLDER
-o SHARDS``: class folders as tar shards that training reads (see vision_attn.data.shards). Parsing and
printing only."""
from __future__ import annotations

import argparse
import json
import os
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
    table = Table(title=f"{report.counted} per class")
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


def _cmd_pack(args: argparse.Namespace, console: Console) -> int:
    from rich.console import Console as RichConsole
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from vision_attn.data.shards import pack_shards

    err = RichConsole(stderr=True, highlight=False)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as bar:
        tasks: dict[str, int] = {}

        def progress(split: str, done: int, total: int) -> None:
            if split not in tasks:
                tasks[split] = bar.add_task(f"packing {split}", total=total)
            bar.update(tasks[split], completed=done)

        result = pack_shards(args.folder, args.output, shard_size=args.shard_size, max_bytes=args.max_bytes,
                             split=args.split, val_fraction=args.val_fraction, split_seed=args.split_seed,
                             skip_bad_images=args.skip_bad_images, threads=args.threads or (os.cpu_count() or 1),
                             progress=progress)
    for problem in result.skipped:
        console.print(f"skipped: {problem.text()}", markup=False, soft_wrap=True)
    console.print(f"packed {result.summary()}", markup=False, soft_wrap=True)
    for split, names in result.shards.items():
        console.print(f"{split}: {names[0]} ... {names[-1]}" if len(names) > 1 else f"{split}: {names[0]}",
                      markup=False)
    console.print(f"train from it: vision-attn train cls --data.root {result.root} ...", markup=False, soft_wrap=True)
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``data``."""
    p = sub.add_parser("data", help="data sets: `data check PATH`, `data pack FOLDER -o SHARDS`",
                       description="Check a data set before training, or pack class folders as tar shards.")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = actions.add_parser("check", help="report a data set's problems",
                           description="Read a whole data set once with the checks training runs (every image "
                           "decoded, every label line read) and list every problem with its file and line, the "
                           "changes training makes (clipped, degenerate, duplicate boxes), class counts and image "
                           "sizes. Exit status 2 when a problem would stop training.")
    c.add_argument("path", help="a classification root (train/ and val/ class folders, or one folder of class "
                   "folders), a YOLO data YAML or its folder, a COCO folder, or demo:digits / demo:digit-boxes")
    c.add_argument("--task", default="auto", choices=["auto", "cls", "det"],
                   help="what the data is for (default: det for a data YAML or COCO folder, else cls)")
    c.add_argument("--format", default="auto", choices=["auto", "coco", "yolo"],
                   help="detection: which copy of a folder that has both (default auto)")
    c.add_argument("--threads", type=int, default=None, help="decoding threads (default: the CPUs)")
    c.add_argument("--json", action="store_true", help="print the whole report as JSON")
    c.set_defaults(func=_cmd_data)
    k = actions.add_parser("pack", help="write class folders as webdataset-format tar shards",
                           description="Write the class folders of a classification root (both splits, as training "
                           "reads them) as tar shards in webdataset's layout ({key}.jpg|png|... with the file's own "
                           "bytes, then {key}.cls), SHARDS/train-000000.tar ... and SHARDS/val-000000.tar ..., and "
                           "SHARDS/index.json last (classes, items per shard, each member's offset). The set appears "
                           "complete or not at all; an existing shard set at SHARDS is replaced. Train with "
                           "`vision-attn train cls --data.root SHARDS`: the same items, order and augmentation as "
                           "the folder.")
    k.add_argument("folder", help="a classification root: train/ and val/ class folders, one folder of class "
                   "folders (split by --val-fraction), or demo:digits")
    k.add_argument("-o", "--output", required=True, help="the folder to write (a new one, or a shard set to replace)")
    size = k.add_mutually_exclusive_group()
    size.add_argument("--shard-size", type=int, default=None, help="images per shard")
    size.add_argument("--max-bytes", default=None,
                      help="bytes per shard at most, e.g. 500000, 256M, 1G (default 256M; a larger image gets a "
                      "shard of its own)")
    k.add_argument("--split", default="all", choices=["train", "val", "all"], help="the splits to write (default all)")
    k.add_argument("--val-fraction", type=float, default=0.2,
                   help="a folder without val/: the share of each class held out (as data.val_fraction; default 0.2)")
    k.add_argument("--split-seed", type=int, default=0, help="a folder without val/: the split's seed (default 0)")
    k.add_argument("--skip-bad-images", action="store_true",
                   help="decode every image first and leave out those that do not decode (each listed)")
    k.add_argument("--threads", type=int, default=None, help="decoding threads for --skip-bad-images (default: the CPUs)")
    k.set_defaults(func=_cmd_pack)
