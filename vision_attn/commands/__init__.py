"""Subcommands of ``vision-attn`` kept in their own files (argument parsing and printing only).

Each module here defines ``register(sub)``, which adds its parser(s) to the ``vision-attn`` subparsers
and sets ``func=(args, console) -> int`` as their default. :func:`vision_attn.cli.build_parser` calls
every module's ``register`` in name order, so a new command is a new file, not an edit of ``cli.py``.
Modules import heavy dependencies (onnx, matplotlib, Lightning) inside their command functions so that
``vision-attn --help`` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil

__all__ = ["ImgSize", "register_all"]


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
        if info.name.startswith("_"):  # helpers of cli.py's own parsers (e.g. _detection: the det task)
            continue
        importlib.import_module(f"{__name__}.{info.name}").register(sub)
