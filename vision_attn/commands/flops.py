"""``vision-attn flops TARGET``: parameters, MACs and FLOPs of a model, a detector YAML or a run, as a
table, JSON or Markdown (parsing and printing only; see :mod:`vision_attn.analysis.flops`)."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from vision_attn.commands import CONVENTIONS, CONVENTIONS_LINE, ImgSize, size_text
from vision_attn.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from vision_attn.analysis import FlopReport


def flops_table(report: FlopReport) -> Table:
    """Parameters, MACs, FLOPs and what a counter without the fused-attention formulas reads."""
    from rich.table import Table

    table = Table(title=f"{report.model}, input {size_text(report.input_shape)}",
                  caption=CONVENTIONS_LINE, caption_justify="left")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("meaning")
    table.add_row("parameters", f"{report.params / 1e6:.2f} M", f"{report.params:,}")
    table.add_row("MACs", f"{report.gmacs:.3f} G", "multiply-accumulates (papers' FLOPs)")
    table.add_row("FLOPs", f"{report.gflops:.3f} G", "2 x MACs (torch.utils.flop_counter)")
    table.add_row("fused attention", f"{report.fused_attention_macs / 1e9:.3f} GMACs", "included in MACs")
    table.add_row("plain counter", f"{report.macs_without_fused_attention / 1e9:.3f} GMACs",
                  "torch/fvcore/thop, no fused attention")
    return table


def module_table(report: FlopReport) -> Table:
    """MACs per module as a tree (enclosing modules with the sum below them), with shares of the total."""
    from rich.table import Table

    from vision_attn.analysis.flops import module_tree  # torch loads here

    table = Table(title="MACs by module")
    table.add_column("module")
    table.add_column("GMACs", justify="right")
    table.add_column("share", justify="right")
    for name, level, macs in module_tree(report.by_module):
        table.add_row("  " * level + name, f"{macs / 1e9:.4f}", f"{100 * macs / max(report.macs, 1):.1f}%")
    return table


def flops_markdown(report: FlopReport, by_module: bool) -> str:
    """The report (and, with ``by_module``, the module tree) as Markdown tables."""
    from vision_attn.analysis.flops import module_tree  # torch loads here
    from vision_attn.analysis.tables import to_markdown

    text = f"**{report.model}**, input {size_text(report.input_shape)}. {CONVENTIONS_LINE}\n\n"
    text += to_markdown(["parameters", "GMACs", "GFLOPs", "fused attention GMACs", "plain counter GMACs"],
                        [[f"{report.params:,}", f"{report.gmacs:.3f}", f"{report.gflops:.3f}",
                          f"{report.fused_attention_macs / 1e9:.3f}",
                          f"{report.macs_without_fused_attention / 1e9:.3f}"]])
    if by_module:
        rows = [["&nbsp;&nbsp;" * level + name, f"{macs / 1e9:.4f}", f"{100 * macs / max(report.macs, 1):.1f}%"]
                for name, level, macs in module_tree(report.by_module)]
        text += "\n" + to_markdown(["module", "GMACs", "share"], rows)
    return text


def _cmd_flops(args: argparse.Namespace, console: Console) -> int:
    from vision_attn.analysis import count_flops
    from vision_attn.analysis.flops import module_tree
    from vision_attn.analysis.targets import load_target  # tasks and Lightning load here

    target = load_target(args.model, scale=args.scale, attention=args.attention)
    img_size = target.img_size
    if args.img_size is not None:
        img_size = args.img_size[0] if len(args.img_size) == 1 else tuple(args.img_size)
    if args.depth < 1:
        raise ConfigError(f"--depth {args.depth}: give 1 or more module levels")
    report = count_flops(target.model, img_size, args.batch, depth=args.depth, name=target.name)
    if args.json:
        out = report.to_dict()
        out["kind"] = target.kind
        if args.by_module:
            out["module_tree"] = [{"name": n, "level": lv, "macs": m} for n, lv, m in module_tree(report.by_module)]
        else:
            out.pop("by_module")
        out["conventions"] = CONVENTIONS
        print(json.dumps(out, indent=2))
        return 0
    if args.markdown:
        print(flops_markdown(report, args.by_module), end="")
        return 0
    console.print(flops_table(report))
    if args.by_module:
        console.print(module_table(report))
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``flops``."""
    p = sub.add_parser("flops", help="parameters, MACs and FLOPs of a model, a detector YAML or a run",
                       description="Parameters, MACs and FLOPs of one forward pass of a registered model, a "
                       "detector YAML or a run's checkpoint. " + CONVENTIONS_LINE)
    p.add_argument("model", metavar="TARGET", help="a registered model name (see `vision-attn models`), a detector "
                   "YAML (e.g. configs/models/yolov8n.yaml) or a run (runs/NAME or its best.ckpt)")
    p.add_argument("--img-size", type=int, nargs="+", metavar="N", action=ImgSize,
                   help="image size: N (square) or H W; default: the model's own (640 for a YAML)")
    p.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    p.add_argument("--scale", default=None, help="YAML: a letter of its scales (default: from the file name)")
    p.add_argument("--attention", default=None, help="model name: insert this block first, e.g. cbam, se")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables instead")
    p.add_argument("--by-module", action="store_true", help="also break the MACs down by module, as a tree")
    p.add_argument("--depth", type=int, default=2, help="--by-module: module levels shown (default 2)")
    p.set_defaults(func=_cmd_flops)
