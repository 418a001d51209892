"""``vision-attn ablate``: one training config without and with attention blocks, over seeds, each run an
ordinary run folder under ``RUNS_DIR/NAME/``, then the report (parsing and printing only; see
vision_attn.ablation)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def _report(plan, console: Console, latency: bool) -> int:
    from vision_attn.ablation.report import build_report, write_report

    report = build_report(plan, latency=latency)
    files = write_report(report)
    print(report.markdown())  # plain: a Markdown table is not wrapped to the terminal
    print("report: " + ", ".join(str(p) for p in files.values()))
    return 0


def _cmd_ablate(args: argparse.Namespace, console: Console) -> int:
    from vision_attn.ablation import make_plan, read_plan
    from vision_attn.ablation.execute import print_commands, run_ablation
    from vision_attn.errors import ConfigError

    extra = list(args.train_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    if args.collect:
        return _report(read_plan(args.collect), console, not args.no_latency)
    if not args.config or not args.blocks:
        raise ConfigError("ablate: give --config TRAINING_CONFIG and --blocks none,SE,CBAM (or --collect RUNS/NAME)")
    plan = make_plan(args.config, args.blocks.split(","), seeds=args.seeds, name=args.name, runs_dir=args.runs_dir,
                     sites=args.sites, after=args.after, epochs=args.epochs, extra=extra)
    if args.print_commands:
        for line in print_commands(plan):
            print(line)
        return 0
    def echo(line: str) -> None:  # plain lines, not wrapped: paths and tables stay greppable
        print(line, flush=True)

    echo(f"ablation {plan.folder}: {len(plan.variants)} variants ({', '.join(plan.variants)}) x {len(plan.seeds)} "
         f"seeds, {args.jobs} at a time" + (f"; blocks after {plan.where}" if plan.where else ""))
    states = run_ablation(plan, jobs=args.jobs, echo=echo)
    failed = [s.spec.name for s in states if s.status == "failed"]
    if failed:
        raise ConfigError(f"{len(failed)} run(s) failed: {', '.join(failed)}; their logs are in {plan.folder / 'logs'}; "
                          f"run the same command again to retry them (finished runs are kept)")
    return _report(plan, console, not args.no_latency)


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("ablate", help="train a config without and with attention blocks over seeds; report the differences",
                       description="Train a training config's variants (none, then each attention block at the same "
                       "sites) over seeds, each an ordinary run folder under RUNS_DIR/NAME/, and report per variant the "
                       "mean and std of the metrics, parameters, GMACs, latency and training time, and the paired "
                       "difference against none with its 95%% confidence interval. Running the same command again "
                       "continues an interrupted ablation. Arguments after -- go to every `vision-attn train`.")
    p.add_argument("--config", help="a training config (file or shipped name): a detector's or a classifier's")
    p.add_argument("--blocks", help="comma-separated: none,SE,CBAM,ECA (none is always included)")
    p.add_argument("--sites", default="backbone",
                   help="where the blocks go: backbone, neck, all (after the YAML's repeated block, or --after), row "
                        "indices 4,6 or a module name; a classifier: backbone/all (every residual block) or a module "
                        "name pattern (default backbone)")
    p.add_argument("--after", default=None, help="detector: the module the blocks follow (default: the one the YAML "
                                                  "repeats most in the section, C2f in YOLOv8)")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1, the same for every variant (default 3)")
    p.add_argument("--epochs", type=int, default=None, help="trainer.max_epochs of every run (default: the config's)")
    p.add_argument("--name", default=None, help="the ablation's folder name (default ablate_CONFIG)")
    p.add_argument("--runs_dir", "--runs-dir", default="runs", help="folder of the runs (default runs)")
    p.add_argument("--jobs", type=int, default=1, help="trainings at once, as separate processes; the CPU threads "
                                                       "are split between them (default 1)")
    p.add_argument("--print-commands", action="store_true",
                   help="write the plan and variants, print one `vision-attn train` command per unfinished run "
                        "(for a job array or a queue) and train nothing")
    p.add_argument("--collect", default=None, metavar="RUNS/NAME",
                   help="build the report from the run folders of this ablation that exist")
    p.add_argument("--no-latency", action="store_true", help="skip the latency measurement in the report")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then arguments for every `vision-attn train`")
    p.set_defaults(func=_cmd_ablate)
