"""One table of runs and models side by side: parameters, GMACs, latency and the accuracy or mAP found
in each run's ``metrics.json``; the Pareto front of accuracy against GMACs, and its plot.

A run folder must hold ``metrics.json`` (written when a run finishes). Classification runs give
``val_top1`` (else ``best_val_top1``), detection runs ``val_map`` (COCO AP@[.5:.95]) else ``val_map50``
(also without the ``val_`` prefix), at the top level or under ``metrics``/``val``. Parameters and GMACs come from the file when it has them, else
they are counted from the run's checkpoint on the meta device. Latency is measured on the CPU at
batch 1 with random weights of the same architecture (the weights do not change the time).
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

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["CompareRow", "METRIC_KEYS", "compare", "compare_figure", "pareto_front", "plot_compare", "read_run_metrics"]

METRIC_KEYS = (("val_top1", "top-1"), ("best_val_top1", "top-1"), ("val_map", "mAP"), ("map", "mAP"),
               ("val_map50", "mAP50"), ("map50", "mAP50"))
"""(key in metrics.json, label), in order of preference; fractions in [0, 1]."""


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


def _find_metric(metrics: dict[str, Any]) -> tuple[float | None, str | None]:
    scopes = [metrics] + [metrics[k] for k in ("metrics", "val") if isinstance(metrics.get(k), dict)]
    for key, label in METRIC_KEYS:
        for scope in scopes:
            v = scope.get(key)
            if isinstance(v, (int, float)) and not math.isnan(v):
                return float(v), label
    return None, None


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
            metric, label = _find_metric(metrics)
            params, gmacs = metrics.get("params"), metrics.get("gmacs")
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
