"""The ``vision-attn`` command: the root parser, ``main`` and the one-line error printing.

Every subcommand is one file in :mod:`vision_attn.commands`, named after it (``models``, ``flops``,
``demo``, ``configs``, ``train cls|det|seg|pose|obb``, ``eval``, ``predict``, ``yaml info|insert|remove``,
``benchmark``, ``compare``, ``attn-map``, ``export``): argument parsing and printing only, every command
a call into the public API. Errors that vision_attn reports (:class:`~vision_attn.errors.VisionAttnError`)
are printed as one line ``error: ...`` on stderr with exit status 2; any other exception (a bug, or a
library's failure) as one line naming its type, with exit status 1; ``--debug`` shows the traceback of
either. A warning is one line ``warning: ...`` on stderr (``--debug``: Python's form). An OSError about a file that a library met (a logger writing to a full disk) is one line
naming the file and the free space, with status 2. Training stopped by a signal after writing its
checkpoint prints where it is and exits with 75.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Sequence

import vision_attn
from vision_attn.commands import CONVENTIONS_LINE, register_all
from vision_attn.errors import TrainingStopped, VisionAttnError, worker_message
from vision_attn.io.atomic import format_bytes, free_space


def build_parser() -> argparse.ArgumentParser:
    """The ``vision-attn`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="vision-attn", description="Attention in computer vision: models, FLOPs, training and a demo.",
        epilog=CONVENTIONS_LINE)
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    parser.add_argument("--version", action="version", version=f"%(prog)s {vision_attn.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    register_all(sub)  # every command: one file each in vision_attn/commands/
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args, extras = parser.parse_known_args(argv)
    except SystemExit as e:  # usage errors (status 2), --help and --version (0)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    if extras:
        print("error: " + unknown_arguments_line(parser, args, extras), file=sys.stderr)
        return 2
    from rich.console import Console  # here, not at the top: --help and usage errors print without rich

    console = Console(highlight=False, width=output_width())
    formatted = warnings.formatwarning
    if not args.debug:  # a library's warning as one line, without its source file and line
        warnings.formatwarning = _one_line_warning
    try:
        return args.func(args, console)
    except TrainingStopped as e:  # a checkpoint was written: not an error, a pause
        print(" ".join(str(e).split()), file=sys.stderr)
        return e.exit_status
    except VisionAttnError as e:
        if args.debug:
            raise
        print("error: " + " ".join(str(e).split()), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `vision-attn models | head`: the reader left; stay quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:  # a file-system fault a library met (a logger's file on a full disk, a removed folder)
        if args.debug or not e.filename:
            raise
        folder, free = free_space(os.path.dirname(os.path.abspath(e.filename)))
        print(f"error: {e.filename}: {e.strerror or e} ({format_bytes(free)} free on the file system of {folder})",
              file=sys.stderr)
        return 2
    except Exception as e:
        if args.debug:
            raise
        print(f"error: {unexpected_error_line(e)} (unexpected: run again with --debug for the traceback)",
              file=sys.stderr)
        return 1
    finally:
        warnings.formatwarning = formatted


def _one_line_warning(message, category, filename, lineno, line=None) -> str:  # noqa: ARG001
    """``warnings.formatwarning`` of the command line: ``warning: MESSAGE`` on one line (``--debug`` keeps
    Python's form, with the file, line and category). Only the text changes: warnings recorded by
    ``catch_warnings(record=True)`` (a test's ``pytest.warns``) are recorded as before."""
    return "warning: " + " ".join(str(message).split()) + "\n"


def unknown_arguments_line(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: Sequence[str]) -> str:
    """One line for arguments the command does not take: each unknown option with the closest the command
    has (``--sortt``: did you mean ``--sort``?), else the options it has."""
    import difflib

    names = [parser.prog]
    while True:  # down to the (sub)command that was given: `yaml info`, `data check`
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, sub.dest, None) if sub is not None else None
        if sub is None or name not in sub.choices:
            break
        parser = sub.choices[name]
        names.append(name)
    command = " ".join(names)
    options = sorted({o for a in parser._actions for o in a.option_strings if o.startswith("--")} - {"--help"})
    unknown = [a for a in extras if a.startswith("-")]
    if not unknown:
        return f"{command}: unexpected argument(s) {' '.join(extras)} (`{command} --help` lists what it takes)"
    parts = []
    for option in unknown:
        bare = {o.lstrip("-"): o for o in options}  # compared without the dashes every option shares
        close = difflib.get_close_matches(option.split("=", 1)[0].lstrip("-"), list(bare), n=1, cutoff=0.6)
        parts.append(f"{option}: did you mean {bare[close[0]]}?" if close else option)
    known = f"its options: {', '.join(options)}" if options else "it takes no options"
    return f"{command}: unknown option {'; '.join(parts)} ({known}; `{command} --help` says more)"


PIPED_WIDTH = 1 << 16
"""The width rich lays out to when standard output is not a terminal (a file, a pipe, CI): wide enough
that no table cell or line is cut or wrapped; a table is as wide as its content."""


def output_width() -> int | None:
    """None (the terminal's width) on a terminal or when ``COLUMNS`` is set, else :data:`PIPED_WIDTH`: rich
    would lay piped output out at 80 columns and cut or fold what is wider."""
    try:
        terminal = os.isatty(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # a replaced stdout (a test's capture, an IDE)
        terminal = False
    return None if terminal or os.environ.get("COLUMNS") else PIPED_WIDTH


def unexpected_error_line(e: BaseException) -> str:
    """``Type: message`` on one line; for an error that a DataLoader brought back from a worker (its message
    holds the worker's traceback), the worker's own message."""
    message = worker_message(e)
    text = " ".join((str(e) if message is None else message).split())
    where = "" if message is None else " (in a data loader worker)"
    return f"{type(e).__name__}: {text}{where}" if text else f"{type(e).__name__}{where}"


if __name__ == "__main__":
    raise SystemExit(main())
