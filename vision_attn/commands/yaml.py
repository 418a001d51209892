"""``vision-attn yaml info|insert|remove FILE``: detector YAMLs in the ultralytics schema (parsing and
printing only; see :mod:`vision_attn.models.yolo` and :mod:`vision_attn.analysis.yaml_info`)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from vision_attn.commands import size_text
from vision_attn.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def _parse_at(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(v) for v in value.replace(" ", "").split(",") if v]
    except ValueError:
        raise ConfigError(f"--at {value!r}: give row indices separated by commas, e.g. 4,6") from None


def _parse_block_args(value: str | None) -> dict[str, Any] | None:
    from vision_attn.io.yaml import load_yaml  # PyYAML loads for an insert, not for --help

    if value is None:
        return None
    loaded = load_yaml(value, f"--args {value!r}")
    if not isinstance(loaded, dict):
        raise ConfigError(f"--args {value!r}: must be a mapping of keyword arguments, e.g. '{{reduction: 8}}'")
    return loaded


def _cmd_yaml_edit(args: argparse.Namespace, console: Console) -> int:
    """``yaml insert`` / ``yaml remove``: edit a detector YAML's rows (re-indexed, comments kept)."""
    from rich.table import Table

    from vision_attn.tasks.detect.edit import edit_detector_yaml

    insert = args.action == "insert"  # --at and --args are read for an insert only
    edit = edit_detector_yaml(args.file, args.action, block=args.block, after=args.after,
                              at=_parse_at(args.at) if insert else None, section=args.section,
                              block_args=_parse_block_args(args.args) if insert else None, output=args.output,
                              checkpoint=args.checkpoint, checkpoint_out=args.checkpoint_out, scale=args.scale,
                              identity_init=args.identity_init, dry_run=args.dry_run, img_size=args.img_size)
    if edit.dry_run:
        sys.stdout.write(edit.diff)
        table = Table(title=f"parameters and GFLOPs at {args.img_size}x{args.img_size}, before -> after")
        for col in ("scale", "params before", "params after", "change", "GFLOPs before", "GFLOPs after"):
            table.add_column(col, justify="left" if col == "scale" else "right")
        for r in edit.comparison:
            table.add_row(r["scale"] or "-", f"{r['params_before']:,}", f"{r['params_after']:,}",
                          f"{r['params_after'] - r['params_before']:+,}", f"{r['gflops_before']:.2f}",
                          f"{r['gflops_after']:.2f}")
        console.print(table)
        console.print(edit.summary + " (dry run: nothing written)")
        return 0
    console.print(f"{edit.summary} -> {edit.output}")
    moved = edit.weights
    if moved is not None:
        console.print(f"checkpoint: {len(moved.transferred)} of {moved.total} tensors transferred -> "
                      f"{edit.checkpoint_out}; {len(moved.new_keys)} new key(s) to train: "
                      f"{', '.join(moved.new_keys) if moved.new_keys else 'none'}", soft_wrap=True)
    return 0


def _cmd_yaml(args: argparse.Namespace, console: Console) -> int:
    """``yaml info FILE``: the per-row table and the totals of a detector YAML."""
    from rich.table import Table

    from vision_attn.analysis.yaml_info import yaml_info
    from vision_attn.models.yolo.from_ultralytics import YamlSource

    if args.action in ("insert", "remove"):
        return _cmd_yaml_edit(args, console)
    info = yaml_info(YamlSource.resolve(args.file, None).spec, scale=args.scale, img_size=args.img_size)
    if args.json:
        print(json.dumps(info.to_dict(), indent=2))
        return 0
    table = Table(title=f"{info.source}  scale {info.scale or '-'}  {info.img_size}x{info.img_size}")
    for col in ("index", "from", "repeats", "params", "module", "arguments", "output shape"):
        table.add_column(col, justify="right" if col in ("index", "repeats", "params") else "left")
    for layer in info.layers:
        shape = size_text(layer.output_shape) if all(isinstance(s, int) for s in layer.output_shape) \
            else str(layer.output_shape)
        table.add_row(str(layer.index), str(layer.from_), str(layer.repeats), f"{layer.params:,}", layer.module,
                      str(layer.arguments), shape)
    console.print(table)
    console.print(f"{len(info.layers)} layers, {info.parameters:,} parameters, {info.gflops:.2f} GFLOPs "
                  "(2 x MACs of convolutions and matrix products)")
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``yaml``."""
    p = sub.add_parser("yaml", help="detector YAMLs (ultralytics schema): `yaml info|insert|remove FILE`",
                       description="Detector YAMLs in the ultralytics schema, read safely (nothing in them runs). "
                       "insert/remove edit the rows with every `from` re-indexed and comments kept.")
    p.add_argument("action", choices=["info", "insert", "remove"],
                   help="info: per-row table (index, from, repeats, params, module, arguments, output shape) and "
                   "totals (layers, parameters, GFLOPs); insert: attention rows after rows of a module; "
                   "remove: take attention rows out")
    p.add_argument("file", nargs="?", default=None, help="a detector YAML, e.g. configs/models/yolov8.yaml (or "
                   "yolov8n.yaml for scale n), or an ultralytics .pt (its model YAML); insert/remove: default the "
                   "YAML inside --checkpoint")
    p.add_argument("--scale", default=None, help="a letter of the file's scales (default: from the file name, "
                   "else the first)")
    p.add_argument("--img-size", type=int, default=640, help="square image size, a multiple of 32 (default 640)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    p.add_argument("--block", default=None, help="insert/remove: attention module, e.g. CBAM, SE, ECA (remove: "
                   "default every attention block)")
    p.add_argument("--after", default=None, help="insert: after every row of this module, e.g. C2f")
    p.add_argument("--section", default="backbone", choices=["backbone", "head", "all"],
                   help="insert: where --after looks (default backbone)")
    p.add_argument("--at", default=None, help="insert: after these rows instead, e.g. 4,6")
    p.add_argument("--args", default=None, help="insert: the block's keyword arguments as a YAML mapping, "
                   "e.g. '{reduction: 8}'")
    p.add_argument("-o", "--output", default=None, help="insert/remove: the edited YAML (written atomically)")
    p.add_argument("--dry-run", action="store_true", help="insert/remove: print the diff and the parameter/GFLOPs "
                   "table at every scale; write nothing")
    p.add_argument("--checkpoint", default=None, help="insert/remove: a state dict of the original model to remap, "
                   "or an ultralytics .pt (best.pt: its YAML, weights and class names)")
    p.add_argument("--checkpoint-out", default=None, help="where to save the remapped state dict (for an ultralytics "
                   ".pt: a detector checkpoint that eval/predict/export/flops and train det's model.pretrained take)")
    p.add_argument("--no-identity-init", dest="identity_init", action="store_false",
                   help="insert with --checkpoint: new rows start from their own initialisation (default: as the "
                   "exact identity, so the model's outputs are unchanged until training moves them)")
    p.set_defaults(func=_cmd_yaml)
