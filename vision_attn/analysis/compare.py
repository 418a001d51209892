"""One table of runs and models side by side: parameters, GMACs, latency and the accuracy or mAP found
in each run's ``metrics.json``; the Pareto front of accuracy against GMACs, and its plot.

A run folder must hold ``metrics.json`` (written when a run finishes). Its metric is its task's primary
metric (``Task.primary``: top-1 for a classifier, mAP@[.5:.95] for a detector, the mask mAP for a
segmenter, the keypoint mAP for a pose model, the rotated-box mAP for an oriented-box model), else the
first of the task's other ``headline`` metrics the file has; a key is looked for at the top level or under
``metrics``/``val``, also without its ``val_`` prefix. The task is the one ``metrics.json`` names, else the
one the run's checkpoint records, else (a folder with neither) the registered task most of whose metrics
the file has. Parameters and GMACs come from the file when it has them, else they are counted from the
run's checkpoint on the meta device. Latency is measured on the CPU at batch 1 with random weights of the
same architecture (the weights do not change the time).
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from vision_attn.analysis.benchmark import benchmark_models
from vision_attn.analysis.flops import count_flops
from vision_attn.analysis.targets import load_target
from vision_attn.errors import ConfigError, DataError
from vision_attn.io.atomic import save_figure
from vision_attn.io.json import read_json
from vision_attn.io.state_dict import RUN_CHECKPOINTS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from vision_attn.tasks.task import Task

__all__ = ["CompareRow", "compare", "compare_figure", "pareto_front", "plot_compare", "read_run_metrics", "run_metric",
           "recorded_gmacs"]


@dataclass
class CompareRow:
    """One run or model: ``metric`` is a fraction (None for a bare model), ``latency_ms`` the median
    at batch 1 (None when not measured)."""

    name: str
    kind: str
    model: str
    params: int
    gmacs: float
    img_size: int | None
    latency_ms: float | None
    metric: float | None
    metric_name: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _lookup(metrics: dict[str, Any], key: str) -> float | None:
    """The number ``key`` names in ``metrics`` (or under ``metrics``/``val``, also without ``val_``)."""
    scopes = [metrics] + [metrics[k] for k in ("metrics", "val") if isinstance(metrics.get(k), dict)]
    for scope in scopes:
        for name in (key, key.removeprefix("val_")):
            v = scope.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v):
                return float(v)
    return None


def _run_task(metrics: dict[str, Any], run: Path) -> Task | None:
    """The registered task of a run folder: the one its ``metrics.json`` names, else the one its checkpoint
    records, else the registered task most of whose metrics (``Task.reported``) the file has (the first
    registered of equals; None when it has none of any)."""
    from vision_attn.tasks.registry import TASKS, get_task, task_of_run  # deferred: the tasks import Lightning

    name = metrics.get("task")
    if isinstance(name, str):
        if name not in TASKS:
            raise DataError(f"{run / 'metrics.json'}: a run of the task {name!r}, which is not registered here "
                            f"(registered: {', '.join(TASKS)}); register its package first (register_task)")
        return get_task(name)
    if any((run / n).is_file() for n in RUN_CHECKPOINTS):
        return task_of_run(run)
    found = [sum(_lookup(metrics, key) is not None for key, _ in t.reported) for t in TASKS.values()]
    return list(TASKS.values())[found.index(max(found))] if found and max(found) else None


def run_metric(metrics: dict[str, Any], run: str | os.PathLike) -> tuple[float | None, str | None]:
    """The metric a run (``metrics``: its ``metrics.json``) is ranked by and its label: its task's primary
    metric, else the first of the task's other headline metrics the file has; (None, None) when none."""
    task = _run_task(metrics, Path(run))
    for key, label in task.reported if task is not None else ():
        value = _lookup(metrics, key)
        if value is not None:
            return value, label
    return None, None


def recorded_gmacs(metrics: dict[str, Any]) -> float | None:
    """The GMACs a run's ``metrics.json`` records (``gmacs``, else half its ``gflops``), or None."""
    for key, per_mac in (("gmacs", 1), ("gflops", 2)):
        v = metrics.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v) / per_mac
    return None


def read_run_metrics(run: str | os.PathLike) -> dict[str, Any]:
    """The ``metrics.json`` of a run folder; a clear :class:`DataError` when there is none."""
    run = Path(run)
    if not run.is_dir():
        raise DataError(f"{run}: no such run folder")
    path = run / "metrics.json"
    if not path.is_file():
        raise DataError(f"{run}: no metrics.json in this run folder (the run has not finished, or this is not a "
                        "run folder); finish or resume the training, or give a model name instead")
    metrics = read_json(path, what="the run's metrics file", max_bytes=64 << 20)
    if not isinstance(metrics, dict):
        raise DataError(f"{path}: expected a JSON object of metrics")
    return metrics


def _latency_ms(model, img_size: int, peak: float) -> float:
    (result,) = benchmark_models({"m": model}, batch=1, img_size=img_size, device="cpu", rounds=3, iters=3,
                                 warmup=1, peak_flops=peak)
    return result.latency_ms


def compare(targets: Sequence[str | os.PathLike], *, latency: bool = True, img_size: int | None = None,
            log: Callable[[str], None] | None = None) -> list[CompareRow]:
    """One row per target: a run folder (with ``metrics.json``) or anything ``vision-attn flops``
    takes (model name, detector YAML, checkpoint). ``img_size`` overrides the size models are
    counted and timed at (default: a run's own, a model's own)."""
    if not targets:
        raise ConfigError("compare: give run folders or model names")
    peak = 1.0  # MFU is not reported here; skip measuring the matmul peak
    rows = []
    for t in targets:
        path = Path(t)
        if path.is_dir():
            metrics = read_run_metrics(path)
            metric, label = run_metric(metrics, path)
            params, gmacs = metrics.get("params"), recorded_gmacs(metrics)
            recount = params is None or gmacs is None or img_size is not None
            target = load_target(path, device="cpu" if latency else "meta") if latency or recount else None
            size = img_size or metrics.get("img_size") or (target.img_size if target else None) or 224
            if recount:
                report = count_flops(target.model, size)
                params, gmacs = report.params, report.gmacs
            name = str(metrics.get("name") or path.name)
            model_name = str(metrics.get("model") or "")
            row = CompareRow(name, "run", model_name, int(params), float(gmacs), size,
                             _latency_ms(target.model, size, peak) if latency else None, metric, label)
        else:
            target = load_target(t, device="cpu" if latency else "meta")
            size = img_size or target.img_size
            report = count_flops(target.model, size, name=target.name)
            size = report.input_shape[-1]
            row = CompareRow(target.name, target.kind, target.name, report.params, report.gmacs, size,
                             _latency_ms(target.model, size, peak) if latency else None, None, None)
        rows.append(row)
        if log:
            log(f"{row.name}: {row.params:,} parameters, {row.gmacs:.3f} GMACs")
    return rows


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points (cost, score) that no other point beats: none has a cost as low or
    lower and a score as high or higher with one of them strictly better. Sorted by cost."""
    front = [i for i, (c, s) in enumerate(points)
             if not any((c2 <= c and s2 >= s) and (c2 < c or s2 > s) for c2, s2 in points)]
    return sorted(front, key=lambda i: points[i][0])


def plot_compare(rows: Sequence[CompareRow], path: str | os.PathLike) -> Path:
    """Accuracy (or mAP) against GMACs, point area by parameters, the Pareto front marked; a PNG."""
    return save_figure(compare_figure(rows), path)


def compare_figure(rows: Sequence[CompareRow]) -> "Figure":
    """The figure of :func:`plot_compare` (a DataError when no row has a metric)."""
    from matplotlib.figure import Figure


    scored = [r for r in rows if r.metric is not None]
    if not scored:
        raise DataError("--plot: none of the targets has an accuracy or mAP (give run folders with metrics.json)")
    points = [(r.gmacs, 100 * r.metric) for r in scored]
    front = pareto_front(points)
    fig = Figure(figsize=(6.4, 4.6))
    ax = fig.add_subplot()
    top = max(r.params for r in scored)
    sizes = [40 + 600 * r.params / top for r in scored]
    ax.scatter([p[0] for p in points], [p[1] for p in points], s=sizes, alpha=0.55, color="tab:blue",
               edgecolor="black", label="run (area: parameters)")
    ax.plot([points[i][0] for i in front], [points[i][1] for i in front], "--o", color="tab:red", markersize=5,
            label="Pareto front")
    for r, (x, y) in zip(scored, points):
        ax.annotate(f"{r.name}\n{r.params / 1e6:.2f} M", (x, y), textcoords="offset points", xytext=(6, 6), fontsize=8)
    labels = sorted({r.metric_name for r in scored if r.metric_name})
    ax.set_xlabel("GMACs per image")
    ax.set_ylabel(f"{' / '.join(labels)} (%)")
    ax.set_title("accuracy against compute")
    ax.grid(alpha=0.3)
    ax.margins(0.15)
    ax.legend(loc="lower right", fontsize=8)
    return fig
