"""``vision-attn search``: which attention block, where, at which scale, for the best accuracy at a given
cost: an Optuna study over a training config's variants, each trial an ordinary run folder, ending in the
Pareto front of accuracy against GFLOPs (parsing and printing only; see vision_attn.search)."""
from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def _cmd_search(args: argparse.Namespace, console: Console) -> int:
    from vision_attn.search import run_search
    from vision_attn.search.study import Heartbeat

    extra = shlex.split(args.train_args or "")

    def echo(line: str) -> None:  # plain lines, not wrapped: paths stay greppable
        print(line, flush=True)

    result = run_search(args.config, args.space, trials=args.trials, out=args.output, storage=args.storage,
                        study=args.study, sampler=args.sampler, pruner=args.pruner, seed=args.seed,
                        epochs=args.epochs, extra=extra, latency=not args.no_latency,
                        heartbeat=Heartbeat(args.heartbeat, args.grace), echo=echo, reseed=args.reseed,
                        jobs=args.jobs)
    echo(f"this worker ran {result.ran} trial(s)")
    if result.front is None:
        echo("no trial has finished yet: the front is written once one has")
        return 0
    print(result.front.markdown())
    print("front: " + ", ".join(str(p) for p in result.files.values()))
    for files in result.reseeded:
        print("over seeds: " + ", ".join(str(p) for p in files.values()))
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("search", help="search attention blocks, sites and scales on Optuna; Pareto front of accuracy "
                                      "against GFLOPs",
                       description="Search a training config's attention blocks, insertion sites (named as `ablate` "
                       "names them), model scales and optionally the learning rate, as a multi-objective Optuna study "
                       "(the task's headline metric up, GFLOPs down) with weak trials pruned from their per-epoch "
                       "validation. Each trial is an ordinary run folder under OUT/runs/. Any number of workers may "
                       "run the same command on one --storage; each runs trials until the study has --trials. "
                       "--train-args go to every `vision-attn train`.")
    p.add_argument("config", help="a training config (file or shipped name): a detector's or a classifier's")
    p.add_argument("--space", required=True, help="SPACE.yaml: blocks, sites, and optionally scales and lr")
    p.add_argument("--trials", type=int, required=True, help="trials of the whole study, over all its workers")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="the search folder (run folders, the front; shared by all workers)")
    p.add_argument("--storage", default=None,
                   help="a database URL (sqlite:///PATH, postgresql://USER@HOST/DB, ...) or a journal file path "
                        "(default: DIR/study.db)")
    p.add_argument("--study", default=None, help="the study's name in the storage (default search_CONFIG)")
    p.add_argument("--sampler", default="tpe", choices=["tpe", "nsga2", "random", "grid"],
                   help="how trials are chosen (default tpe; grid: every block x site x scale once)")
    p.add_argument("--pruner", default="halving", choices=["halving", "hyperband", "none"],
                   help="successive halving, Hyperband, or no pruning, on the per-epoch validation (default halving)")
    p.add_argument("--seed", type=int, default=0, help="the training seed of every trial (default 0)")
    p.add_argument("--epochs", type=int, default=None, help="trainer.max_epochs of every trial (default: the config's)")
    p.add_argument("--heartbeat", type=int, default=30, metavar="S",
                   help="database storage: seconds between a running trial's heartbeats (default 30)")
    p.add_argument("--grace", type=int, default=120, metavar="S",
                   help="database storage: a trial silent this long is failed and retried (default 120)")
    p.add_argument("--reseed", type=int, default=0, metavar="N",
                   help="then re-train each configuration of the front and none over N seeds with `ablate` "
                        "(OUT/reseed-tNNNN: paired differences, 95%% intervals); run it in one process, after "
                        "the workers")
    p.add_argument("--jobs", type=int, default=1, help="--reseed: trainings at once (default 1)")
    p.add_argument("--no-latency", action="store_true", help="skip the latency measurement of the front")
    p.add_argument("--train-args", default=None, metavar="'ARGS'",
                   help="arguments for every `vision-attn train`, quoted as one: '--trainer.limit_train_batches 20'")
    p.set_defaults(func=_cmd_search)
