"""``vision-attn compare RUN_DIR... | MODEL...``: params, GMACs, latency and accuracy/mAP in one table,
with ``--plot`` (accuracy against GMACs, Pareto front), ``--markdown`` and ``--csv`` (parsing and
printing only; see vision_attn.analysis.compare)."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

HEADERS = ["name", "model", "params (M)", "GMACs", "image", "latency ms (batch 1)", "metric", "value (%)", "Pareto"]


def _cells(rows: list, front: set[int]) -> list[list[Any]]:
    return [[r.name, r.model, f"{r.params / 1e6:.3f}", f"{r.gmacs:.4f}", r.img_size,
             None if r.latency_ms is None else f"{r.latency_ms:.2f}", r.metric_name,
             None if r.metric is None else f"{100 * r.metric:.2f}", "yes" if i in front else None]
            for i, r in enumerate(rows)]


def _cmd_compare(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    from vision_attn.analysis.compare import compare, pareto_front, plot_compare
    from vision_attn.analysis.tables import to_csv, to_markdown

    rows = compare(args.targets, latency=not args.no_latency, img_size=args.img_size)
    scored = [i for i, r in enumerate(rows) if r.metric is not None]
    front = {scored[j] for j in pareto_front([(rows[i].gmacs, rows[i].metric) for i in scored])}
    if args.plot:
        plot_compare(rows, args.plot)
    if args.html:
        from vision_attn.analysis.report import write_html_report

        write_html_report([t for t, r in zip(args.targets, rows) if r.kind == "run"], args.html)
    cells = _cells(rows, front)
    if args.json:
        print(json.dumps([dict(r.to_dict(), pareto=i in front) for i, r in enumerate(rows)], indent=2))
    elif args.csv:
        print(to_csv(HEADERS, cells), end="")
    elif args.markdown:
        print(to_markdown(HEADERS, cells), end="")
    else:
        table = Table(caption="GMACs: multiply-accumulates per image (papers' FLOPs); latency: CPU, batch 1, median; "
                      "Pareto: no other row has both fewer GMACs and a higher metric", caption_justify="left")
        for h in HEADERS:
            table.add_column(h, justify="left" if h in ("name", "model", "metric") else "right")
        for row in cells:
            table.add_row(*("" if c is None else str(c) for c in row))
        console.print(table)
    if args.plot:
        console.print(f"plot: {args.plot}", markup=False)
    if args.html:
        console.print(f"report: {args.html}", markup=False)
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("compare", help="runs or models side by side: params, GMACs, latency, accuracy/mAP",
                       description="One table of parameters, GMACs, CPU latency (batch 1) and the accuracy or mAP "
                       "in each run's metrics.json. Targets: run folders (runs/NAME), model names, detector YAMLs.")
    p.add_argument("targets", nargs="+", metavar="RUN_DIR|MODEL", help="run folders and/or model names")
    p.add_argument("--plot", default=None, metavar="OUT.png",
                   help="accuracy against GMACs, point size by parameters, Pareto front marked")
    p.add_argument("--html", default=None, metavar="REPORT.html",
                   help="also the runs on one self-contained page (what `vision-attn report` writes)")
    p.add_argument("--img-size", type=int, default=None, help="count and time at this size (default: each one's own)")
    p.add_argument("--no-latency", action="store_true", help="skip the latency measurement")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--markdown", action="store_true", help="print a Markdown table")
    out.add_argument("--csv", action="store_true", help="print CSV")
    out.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_compare)
