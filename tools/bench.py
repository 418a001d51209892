"""The benchmarks of vision_attn: one entry point, one suite a measurement.

    python tools/bench.py --list                      # the suites, their groups and what they measure
    python tools/bench.py SUITE [OPTIONS] [--json FILE]
    python tools/bench.py SUITE --help                # a suite's options and what it measures
    python tools/bench.py SUITE --quick               # small sizes, one or two rounds: checks that it runs
    python tools/bench.py --group cpu [--quick] [--out DIR]   # every suite of a group, DIR/SUITE.json each

Every suite prints Markdown tables and, with ``--json FILE`` (or ``--out DIR`` for a group), writes
one JSON file: the suite, the command line, its parameters, the environment (CPU model, AVX2,
AVX-512 and AMX flags, threads, torch and peer versions) and the figures. The timing, the alternation
with the peer and the JSON are shared (tools/suites/harness.py).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

from tools.suites import GROUPS, suites  # noqa: E402
from tools.suites.harness import UNSET, Record, Suite, command_line  # noqa: E402


def _add_params(parser: argparse.ArgumentParser, suite: Suite) -> None:
    for p in suite.params:
        kw: dict = {"help": p.help + (f" (default {p.default!r}" + ("" if p.quick is UNSET else f"; --quick {p.quick!r}")
                                      + ")")}
        if isinstance(p.default, bool):
            parser.add_argument(p.flag, dest=p.name, action=argparse.BooleanOptionalAction, default=UNSET, **kw)
            continue
        if isinstance(p.default, (list, tuple)):
            kw["nargs"] = "+"
            sample = p.default[0] if p.default else ""
        else:
            sample = p.default
        kind = p.type or (type(sample) if isinstance(sample, (int, float, str)) else str)
        parser.add_argument(p.flag, dest=p.name, type=kind, choices=p.choices, default=UNSET, **kw)
    parser.add_argument("--quick", action="store_true",
                        help="small sizes and one or two rounds: seconds, to check the suite (no figures to quote)")
    parser.add_argument("--json", metavar="FILE", help="write the record (environment, parameters, figures) here")


def _values(suite: Suite, args: argparse.Namespace | None, quick: bool) -> dict:
    values = {}
    for p in suite.params:
        given = getattr(args, p.name, UNSET) if args is not None else UNSET
        if given is not UNSET:
            values[p.name] = given
        elif quick and p.quick is not UNSET:
            values[p.name] = p.quick
        else:
            values[p.name] = p.default
        if isinstance(values[p.name], tuple):
            values[p.name] = list(values[p.name])
    return values


def run(suite: Suite, values: dict, argv: list[str], json_path: str | None) -> Record:
    missing = suite.missing()
    if missing:
        raise SystemExit(f"{suite.name}: needs {', '.join(missing)} (not installed here)")
    record = Record(suite.name, values, command_line(suite.name, argv), json_path)
    print(f"`{record.command}`\n", flush=True)
    suite.run(SimpleNamespace(**values), record)
    record.save()
    return record


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    table = suites()
    parser = argparse.ArgumentParser(prog="tools/bench.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--list", action="store_true", help="list the suites")
    parser.add_argument("--group", choices=GROUPS, help="run every suite of this group with its defaults")
    parser.add_argument("--quick", action="store_true", help="with --group: every suite's quick setting")
    parser.add_argument("--out", metavar="DIR", help="with --group: write DIR/SUITE.json for each suite")
    sub = parser.add_subparsers(dest="suite", metavar="SUITE")
    for suite in table.values():
        p = sub.add_parser(suite.name, help=suite.help, description=suite.doc or suite.help,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        _add_params(p, suite)
    args = parser.parse_args(argv)
    if args.list:
        for suite in table.values():
            missing = suite.missing()
            note = f"  [needs {', '.join(missing)}]" if missing else ""
            print(f"{suite.name:22s} {suite.group:6s} {suite.help}{note}")
        return 0
    if args.group:
        failed = []
        for suite in (s for s in table.values() if s.group == args.group):
            if suite.missing():
                print(f"# {suite.name}: skipped, needs {', '.join(suite.missing())}\n", flush=True)
                continue
            out = os.path.join(args.out, f"{suite.name}.json") if args.out else None
            start = time.perf_counter()
            try:
                run(suite, _values(suite, None, args.quick), ["--quick"] if args.quick else [], out)
            except Exception as e:  # noqa: BLE001 - one suite that fails does not stop the group
                failed.append(suite.name)
                print(f"# {suite.name} failed: {type(e).__name__}: {e}\n", file=sys.stderr, flush=True)
            print(f"# {suite.name}: {time.perf_counter() - start:.0f} s\n", flush=True)
        if failed:
            print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1 if failed else 0
    if not args.suite:
        parser.print_help()
        return 2
    suite = table[args.suite]
    rest = argv[argv.index(args.suite) + 1:]
    run(suite, _values(suite, args, args.quick), [a for a in rest if a != "--json" and a != args.json], args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
