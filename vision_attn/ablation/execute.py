"""Training an ablation's runs: each one an ordinary ``vision-attn train`` process, ``jobs`` at a time with
the machine's threads split between them, continuing where an interrupted ablation stopped.

A run whose folder holds ``metrics.json`` has finished and is kept; one with a ``last.ckpt`` but no
``metrics.json`` was stopped and continues from that checkpoint (``--resume true``); any other is
trained from the start. Each run's output goes to ``NAME/logs/RUN.log``.

A stop request to the ablation (SIGTERM or SIGUSR1 from a scheduler, Ctrl-C) is passed on: no new run
starts, each running training writes a checkpoint and exits (SIGTERM to each; Ctrl-C reaches them from
the terminal), and :func:`run_ablation` raises :class:`~vision_attn.errors.TrainingStopped` once they
have (``vision-attn ablate`` exits 75); the same command continues.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from vision_attn.ablation.plan import AblationPlan, RunSpec
from vision_attn.errors import ConfigError, TrainingStopped
from vision_attn.tasks.signals import StopRequest

__all__ = ["RunState", "run_state", "resume_args", "run_ablation", "print_commands", "progress_table"]

Echo = Callable[[str], None]


@dataclass(frozen=True)
class RunState:
    """``status``: ``done``, ``stopped`` (a checkpoint and no metrics), ``new`` or ``failed`` (this time)."""

    spec: RunSpec
    status: str
    seconds: float | None = None
    log: Path | None = None


def run_state(spec: RunSpec) -> str:
    if (spec.folder / "metrics.json").is_file():
        return "done"
    if (spec.folder / "last.ckpt").is_file():
        return "stopped"
    return "new"


def resume_args(spec: RunSpec, status: str) -> list[str]:
    if status == "stopped":
        return ["--resume", "true"]
    return ["--overwrite", "true"] if spec.folder.exists() else []  # a folder a killed run left before any checkpoint


def print_commands(plan: AblationPlan, threads: int | None = None) -> list[str]:
    """One ``vision-attn train`` command line per run that is not finished, for a job array or any queue."""
    lines = []
    for spec in plan.runs(threads):
        status = run_state(spec)
        if status != "done":
            lines.append(shlex.join(["vision-attn", "train", plan.task, *spec.args, *resume_args(spec, status)]))
    return lines


def progress_table(plan: AblationPlan, states: dict[str, str]) -> str:
    """variant x seed: the status of each run."""
    seeds = plan.seeds
    width = max(len(v) for v in plan.variants)
    head = f"{'variant':{width}s}  " + "  ".join(f"seed {s}" for s in seeds)
    lines = [head]
    for variant in plan.variants:
        cells = [f"{states.get(f'{variant}-s{s}', 'new'):>6s}" for s in seeds]
        lines.append(f"{variant:{width}s}  " + "  ".join(cells))
    return "\n".join(lines)


def run_ablation(plan: AblationPlan, *, jobs: int = 1, echo: Echo = print,
                 env: dict[str, str] | None = None) -> list[RunState]:
    """Train every unfinished run of ``plan``, ``jobs`` processes at a time; returns each run's state.
    Interrupting it (Ctrl-C) stops the trainings it started; running it again continues."""
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: give at least 1")
    threads = max(1, (os.cpu_count() or 1) // jobs)
    specs = plan.runs(threads)
    logs = plan.folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    states = {s.name: run_state(s) for s in specs}
    done = sum(v == "done" for v in states.values())
    if done:
        echo(f"continuing {plan.folder}: {done} of {len(specs)} runs already finished")
    lock = threading.Lock()
    procs: set[subprocess.Popen] = set()

    def pass_on(signum: int) -> None:  # runs in the main thread, in the signal handler
        if signum == signal.SIGINT:  # Ctrl-C reached the trainings too (one process group)
            return
        with lock:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)

    stop = StopRequest(on_request=pass_on, grace_s=None)  # the trainings keep their own grace periods

    def train(spec: RunSpec) -> RunState:
        status = states[spec.name]
        if status == "done":
            return RunState(spec, "done")
        log = logs / f"{spec.name}.log"
        cmd = plan.command(spec) + resume_args(spec, status)
        start = time.perf_counter()
        with open(log, "a") as out:
            with lock:  # under the lock: a stop request either finds this process or prevents it
                if stop.signum is not None:
                    return RunState(spec, status)
                out.write(f"$ {' '.join(cmd)}\n")
                out.flush()
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
                procs.add(proc)
            rc = proc.wait()
            with lock:
                procs.discard(proc)
        seconds = time.perf_counter() - start
        if rc == 0 and run_state(spec) == "done":
            result = "done"
        else:
            result = "stopped" if stop.signum is not None else "failed"
        with lock:
            states[spec.name] = result
            finished = sum(v == "done" for v in states.values())
            tail = {"done": "", "stopped": f" (exit {rc}: the same command continues it)"}.get(
                result, f" (exit {rc}; see {log})")
            echo(f"[{finished}/{len(specs)}] {spec.variant} seed {spec.seed}: {result} in {seconds:.0f} s{tail}")
            echo(progress_table(plan, states))
        return RunState(spec, result, seconds, log)

    pool = ThreadPoolExecutor(max_workers=jobs)
    stop.install()
    try:
        results = list(pool.map(train, specs))
    except BaseException:  # a second Ctrl-C: stop the trainings now
        with lock:
            for proc in procs:
                proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        stop.uninstall()
    pool.shutdown()
    if stop.signum is not None:
        done = sum(r.status == "done" for r in results)
        raise TrainingStopped(f"ablation {plan.folder} stopped by {stop.name}: {done} of {len(results)} runs "
                              "finished, each running training wrote a checkpoint; run the same command again "
                              "to continue where it stopped")
    return results
