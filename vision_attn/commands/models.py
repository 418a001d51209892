"""``vision-attn models [PATTERN]``: registered variants with parameters and GMACs (parsing and printing
only; the counts are :func:`vision_attn.analysis.count_model_flops`)."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, Sequence

import vision_attn
from vision_attn.commands import CONVENTIONS, size_text
from vision_attn.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def models_table(names: Sequence[str], title: str | None = None) -> tuple[Table, list[dict[str, Any]]]:
    """A table (and JSON rows) of registered variants: parameters, GMACs at their default size (counted once
    per version of the code: vision_attn.analysis.model_table)."""
    from rich.table import Table

    from vision_attn.analysis.model_table import model_rows  # torch loads here

    table = Table(title=title, caption=CONVENTIONS["macs"] + ".", caption_justify="left")
    table.add_column("model")
    table.add_column("params (M)", justify="right")
    table.add_column("GMACs", justify="right")
    table.add_column("image", justify="right")
    rows = model_rows(names)
    for row in rows:
        table.add_row(row["name"], f"{row['params'] / 1e6:.2f}", f"{row['macs'] / 1e9:.2f}", size_text(row["img_size"]))
    return table, rows


def _cmd_models(args: argparse.Namespace, console: Console) -> int:
    names = vision_attn.list_models(args.pattern)
    if not names:
        raise ConfigError(f"no registered model matches {args.pattern!r}: run `vision-attn models` to list them all")
    table, rows = models_table(names)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        console.print(table)
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``models``."""
    p = sub.add_parser("models", help="list registered models with parameters and GMACs",
                       description="Registered variants: parameters (M) and GMACs at their default image size. "
                       + CONVENTIONS["macs"] + ".")
    p.add_argument("pattern", nargs="?", default="*", help="shell-style pattern, e.g. 'deit_*' (default: all)")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    p.set_defaults(func=_cmd_models)
