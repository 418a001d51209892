"""``vision-attn report RUNS_OR_ABLATIONS... -o report.html``: runs and ablations on one self-contained HTML
page (parsing and printing only; see vision_attn.analysis.report)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from vision_attn.io.atomic import format_bytes

if TYPE_CHECKING:
    from rich.console import Console


def _cmd_report(args: argparse.Namespace, console: Console) -> int:
    from vision_attn.analysis.report import write_html_report

    done = write_html_report(args.sources, args.output, images=args.images or (), method=args.method,
                             title=args.title)
    console.print(f"report: {done.path} ({format_bytes(done.bytes)}; {done.runs} run(s), {done.ablations} "
                  f"ablation(s), maps of {done.images} image(s))", markup=False, highlight=False)
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("report", help="runs and ablations on one self-contained HTML page",
                       description="One HTML file, readable offline (every picture embedded, nothing fetched): "
                       "an ablation's table and paired intervals, the metrics table, the configuration differences, "
                       "curves, accuracy against GMACs, each run's confusion matrix or predictions and, with "
                       "--images, the runs' class-activation maps side by side.")
    p.add_argument("sources", nargs="+", metavar="RUN_OR_ABLATION", help="run folders and ablation folders")
    p.add_argument("-o", "--output", required=True, metavar="REPORT.html", help="the page to write")
    p.add_argument("--images", nargs="+", default=None, metavar="IMAGE",
                   help="images to draw the runs' maps on (an ablation: the first seed of each variant)")
    p.add_argument("--method", default=None, metavar="METHOD", help="the maps' method (see `explain`; default: the "
                   "task's)")
    p.add_argument("--title", default=None, help="the page's title (default: the sources' names)")
    p.set_defaults(func=_cmd_report)
