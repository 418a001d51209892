"""Subcommands of ``vision-attn`` kept in their own files (argument parsing and printing only).

The rule: every subcommand is one file here named after it (``eval.py`` serves ``eval cls|det``), which
defines ``register(sub)``: it adds its parser(s) to the ``vision-attn`` subparsers and sets
``func=(args, console) -> int`` as their default. :func:`vision_attn.cli.build_parser` calls every
module's ``register`` in name order, so a new command is a new file, not an edit of ``cli.py``. Files
whose name starts with ``_`` are helpers, not commands.
Modules import heavy dependencies (torch, Lightning, onnx, matplotlib, and rich's tables) inside their
command functions, never at the top: ``register`` needs none of them, so ``vision-attn --help`` loads
nothing beyond the standard library (tests/test_startup.py checks that torch and Lightning stay out).
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
from typing import Sequence

__all__ = ["ImgSize", "register_all", "CONVENTIONS", "CONVENTIONS_LINE", "size_text"]

CONVENTIONS = {
    "macs": "MACs: multiply-accumulates, what papers call FLOPs",
    "flops": "FLOPs = 2 x MACs, torch.utils.flop_counter's convention",
    "attention": "fused attention (scaled_dot_product_attention) is counted",
}
CONVENTIONS_LINE = "; ".join(CONVENTIONS.values()) + "."


def size_text(hw: Sequence[int]) -> str:
    """``224x224``: sizes as the tables print them."""
    return "x".join(str(s) for s in hw)


class ImgSize(argparse.Action):
    """``--img-size N`` or ``--img-size H W`` (with ``type=int, nargs="+"``): one or two positive integers."""

    def __call__(self, parser, namespace, values, option_string=None):
        if len(values) > 2 or any(v < 1 for v in values):
            got = " ".join(map(str, values))
            parser.error(f"{option_string} takes N (square) or H W, positive integers; got {got}")
        setattr(namespace, self.dest, list(values))


def register_all(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add the parsers of every module in this package to ``sub``."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):  # helpers, not commands
            continue
        importlib.import_module(f"{__name__}.{info.name}").register(sub)
