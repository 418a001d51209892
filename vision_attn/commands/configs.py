"""``vision-attn configs [PATTERN]`` lists the shipped model YAMLs and training configs; ``vision-attn
configs show NAME`` prints one to copy (parsing and printing only; see :mod:`vision_attn.io.resources`)."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from vision_attn.errors import ConfigError
from vision_attn.io.resources import KINDS, find_shipped, shipped_configs

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def _cmd_configs(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    words = list(args.words)
    if words and words[0] == "show":
        if len(words) != 2:
            raise ConfigError("configs show: give one name, e.g. `vision-attn configs show demo_digits`")
        path = find_shipped(words[1])
        if path is None:
            raise ConfigError(f"configs show {words[1]}: no shipped config of that name; `vision-attn configs` "
                              "lists them")
        sys.stdout.write(path.read_text(encoding="utf-8"))
        return 0
    if len(words) > 1:
        raise ConfigError("configs: give at most one PATTERN (or `configs show NAME`)")
    pattern = words[0] if words else "*"
    found = shipped_configs(pattern)
    if not found:
        raise ConfigError(f"no shipped config matches {pattern!r}: run `vision-attn configs` to list them all")
    tasks = [k for k in KINDS if k != "model"]  # the tasks with shipped training configs
    table = Table(caption=f"kind: model (a detector YAML: yaml info|insert NAME, flops NAME, model.yaml), "
                  f"{', '.join(tasks)} (train {'|'.join(tasks)} --config NAME); a model YAML also takes a scale letter "
                  "(yolov8n.yaml); "
                  "`vision-attn configs show NAME` prints one", caption_justify="left")
    for col in ("name", "kind", "what it is"):
        table.add_column(col)
    for c in found:
        table.add_row(c.path.name if c.kind == "model" else c.name, c.kind, c.description)
    console.print(table)
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``configs``."""
    p = sub.add_parser("configs", help="the shipped model YAMLs and training configs: `configs [PATTERN]`, "
                       "`configs show NAME`",
                       description="List the model YAMLs (configs/models) and training configs (configs/train) "
                       "shipped with vision_attn, usable by name from any folder; `configs show NAME` prints one.")
    p.add_argument("words", nargs="*", metavar="PATTERN | show NAME",
                   help="a shell-style pattern (e.g. 'yolo*'), or `show NAME`")
    p.set_defaults(func=_cmd_configs)
