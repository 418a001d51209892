"""A search worker whose trials cost nothing: the study machinery of `vision-attn search` (storage,
heartbeat, retries, quota: vision_attn.search.study.run_worker, what every worker runs) with an objective
that draws a block and a site, records the trial in a log and returns numbers made from its parameters.
Run as a process by the tests (it loads no torch):

    python cheap_worker.py STORAGE TRIALS LOG [--hang-at N] [--sampler grid]

``--hang-at N``: the trial numbered N never ends (the test kills the worker there); ``--stop-at N``: the
trial numbered N ends as a training stopped by SIGTERM does (TrainingStopped)."""
import argparse
import json
import os
import time
from pathlib import Path

from vision_attn.errors import TrainingStopped
from vision_attn.search.study import Heartbeat, frozen, open_storage, open_study, original_number, run_worker

BLOCKS, SITES = ["SE", "CBAM"], ["backbone", "neck"]
SPACE = {"blocks": BLOCKS, "sites": SITES, "scales": [], "lr": None}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("storage")
    p.add_argument("trials", type=int)
    p.add_argument("log")
    p.add_argument("--hang-at", type=int, default=None)
    p.add_argument("--stop-at", type=int, default=None)
    p.add_argument("--sampler", default="random")
    args = p.parse_args()
    log = Path(args.log)

    def objective(trial, handle):
        block = trial.suggest_categorical("block", BLOCKS)
        site = trial.suggest_categorical("site", SITES)
        number = original_number(frozen(trial))
        record = {"number": trial.number, "original": number, "pid": os.getpid(), "block": block, "site": site}
        with open(log, "a") as f:
            f.write(json.dumps({**record, "event": "start"}) + "\n")
        if trial.number == args.hang_at:
            time.sleep(3600)
        if trial.number == args.stop_at and number == trial.number:  # as a training stopped by SIGTERM
            raise TrainingStopped(f"trial {trial.number} stopped by SIGTERM")
        time.sleep(0.2)
        with open(log, "a") as f:
            f.write(json.dumps({**record, "event": "done"}) + "\n")
        return BLOCKS.index(block) + 0.1 * SITES.index(site), 1.0 + SITES.index(site)

    storage = open_storage(args.storage, log.parent, Heartbeat(1, 2))
    handle = open_study(storage, "cheap", {"space": SPACE, "test": 1}, trials=args.trials, sampler=args.sampler,
                        seed=0)
    try:
        run_worker(handle, objective, echo=lambda line: None)
    except TrainingStopped:
        raise SystemExit(75)


if __name__ == "__main__":
    main()
