"""A search's result: the Pareto front of its finished trials (the task's primary metric against GFLOPs, Optuna's
``best_trials``), each with its parameters, latency at batch 1 on this machine and run folder; written as
``front.json`` (every number, and every trial), ``front.csv``, ``front.md`` and ``front.png`` (all finished
trials, the front joined), each atomically.
"""
from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import optuna
from matplotlib.figure import Figure
from optuna.trial import TrialState

from vision_attn.analysis.compare import compare
from vision_attn.io.atomic import save_figure, write_json, write_text
from vision_attn.search.study import is_surplus, original_number

__all__ = ["FrontRow", "Front", "build_front", "write_front"]


@dataclass
class FrontRow:
    trial: int
    block: str
    site: str | None
    scale: str | None
    lr: float | None
    metric: float
    gflops: float
    params: int
    latency_ms: float | None
    epochs: int
    run: str


@dataclass
class Front:
    study: str
    metric: tuple[str, str]
    rows: list[FrontRow]  # the front, by GFLOPs
    trials: list[dict[str, Any]]  # every trial: number, state, params, values

    def to_json(self) -> dict[str, Any]:
        return {"study": self.study, "metric": {"key": self.metric[0], "label": self.metric[1]},
                "front": [asdict(r) for r in self.rows], "trials": self.trials}

    def table(self) -> list[dict[str, Any]]:
        label = self.metric[1]
        return [{"trial": r.trial, "block": r.block, "site": r.site or "", "scale": r.scale or "",
                 "lr": "" if r.lr is None else f"{r.lr:.3g}", f"{label} %": round(100 * r.metric, 2),
                 "GFLOPs": round(r.gflops, 4), "params": r.params,
                 "latency ms (batch 1)": "" if r.latency_ms is None else round(r.latency_ms, 2), "epochs": r.epochs,
                 "run": r.run} for r in self.rows]

    def markdown(self) -> str:
        rows = self.table()
        if not rows:
            return "no finished trial yet\n"
        cols = list(rows[0])
        fmt = lambda x: f"{x:,}" if isinstance(x, int) else str(x)  # noqa: E731
        lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
        return "\n".join(lines + ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]) + "\n"

    def csv(self) -> str:
        buf = io.StringIO()
        rows = self.table()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["trial"])
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue()


def _trial_record(t: optuna.trial.FrozenTrial) -> dict[str, Any]:
    return {"number": t.number, "original": original_number(t), "state": t.state.name, "params": t.params,
            "values": t.values, "gflops": t.user_attrs.get("gflops"), "epochs": t.user_attrs.get("epochs"),
            "fit_time_s": t.user_attrs.get("fit_time_s"), "run": t.user_attrs.get("run")}


def build_front(study: optuna.Study, metric: tuple[str, str], *, latency: bool = True) -> Front:
    """The front of ``study`` (its finished trials no other beats on both objectives), latency measured on
    this machine unless ``latency`` is False."""
    best = sorted(study.best_trials, key=lambda t: (t.values[1], -t.values[0]))
    timed = compare([t.user_attrs["run"] for t in best], latency=True) if latency and best else [None] * len(best)
    rows = [FrontRow(trial=original_number(t), block=t.params["block"], site=t.params.get("site"),
                     scale=t.params.get("scale"), lr=t.params.get("lr"), metric=t.values[0], gflops=t.values[1],
                     params=int(t.user_attrs.get("params") or 0), latency_ms=None if r is None else r.latency_ms,
                     epochs=int(t.user_attrs.get("epochs") or 0), run=str(t.user_attrs.get("run")))
            for t, r in zip(best, timed)]
    trials = [_trial_record(t) for t in study.get_trials(deepcopy=False) if not is_surplus(t)]
    return Front(study.study_name, metric, rows, trials)


def _plot(front: Front, study: optuna.Study, path: Path) -> Path:
    fig = Figure(figsize=(6.4, 4.6))
    ax = fig.add_subplot()
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    ax.scatter([t.values[1] for t in done], [100 * t.values[0] for t in done], color="0.7", label="trials")
    xs, ys = [r.gflops for r in front.rows], [100 * r.metric for r in front.rows]
    ax.plot(xs, ys, "o-", drawstyle="steps-post", color="tab:red", label="Pareto front")
    for r in front.rows:
        ax.annotate(r.block if r.site is None else f"{r.block}@{r.site}", (r.gflops, 100 * r.metric),
                    textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.ticklabel_format(axis="x", useOffset=False, style="plain")  # blocks differ by a fraction of a percent
    ax.set_xlabel("GFLOPs per image")
    ax.set_ylabel(f"{front.metric[1]} (%)")
    ax.set_title(f"{front.study}: {front.metric[1]} against GFLOPs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def write_front(front: Front, study: optuna.Study, out: Path) -> dict[str, Path]:
    """``front.json``, ``front.csv``, ``front.md`` and ``front.png`` in ``out``."""
    return {"json": write_json(out / "front.json", front.to_json()), "csv": write_text(out / "front.csv", front.csv()),
            "markdown": write_text(out / "front.md", front.markdown()), "plot": _plot(front, study, out / "front.png")}
