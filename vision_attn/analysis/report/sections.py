"""The sections of a report, each HTML from the runs and ablations read by :mod:`.sources`."""
from __future__ import annotations

import math
from typing import Any, Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from vision_attn.analysis.compare import compare, compare_figure, recorded_gmacs
from vision_attn.analysis.report.embed import figure_uri, image_uri
from vision_attn.analysis.report.page import figure, section, table
from vision_attn.analysis.report.sources import AblationSource, RunSource

__all__ = ["metrics_section", "config_section", "curves_section", "compute_section", "ablation_section",
           "run_figures_section", "MAX_CURVES"]

MAX_CURVES = 6
"""Panels of the curves figure (the validation metrics first, then the losses)."""

IGNORED_CONFIG = ("name",)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def metrics_section(runs: Sequence[RunSource]) -> str:
    """One row per run: model, parameters, GMACs, image size, epochs, training time and every validation
    figure its metrics.json has (``val_*``, ``best_val_*``)."""
    keys: list[str] = []
    for r in runs:
        keys += [k for k, v in r.metrics.items() if k.startswith(("val_", "best_val_")) and
                 isinstance(v, (int, float)) and k not in keys]
    header = ["run", "model", "params", "GMACs", "image", "epochs", "train s", *keys]
    rows = []
    for r in runs:
        m = r.metrics
        gmacs = recorded_gmacs(m)
        rows.append([r.name if r.name == m.get("name") else f"{r.name} ({m.get('name', '')})", m.get("model", ""),
                     f"{m['params']:,}" if isinstance(m.get("params"), int) else "",
                     "" if gmacs is None else f"{gmacs:.4g}", m.get("img_size", ""), m.get("epochs", ""),
                     _cell(m["fit_time_s"]) if isinstance(m.get("fit_time_s"), (int, float)) else "",
                     *[_cell(m[k]) if isinstance(m.get(k), (int, float)) else "" for k in keys]])
    return section("Metrics", table(header, rows), "val_* are fractions (1.0 = 100%) except losses; GMACs: "
                   "multiply-accumulates per image (GFLOPs = 2 x GMACs)")


def config_section(runs: Sequence[RunSource]) -> str:
    """The configuration keys whose values differ between the runs."""
    keys = sorted({k for r in runs for k in r.config if k.rsplit(".", 1)[-1] not in IGNORED_CONFIG})
    differ = [k for k in keys if len({repr(r.config.get(k)) for r in runs}) > 1]
    if len(runs) < 2:
        return section("Configuration differences", "<p>One run: nothing to compare.</p>")
    if not differ:
        return section("Configuration differences", "<p>The runs' configurations are the same (apart from their "
                       "names).</p>")
    rows = [[k, *[_cell(r.config.get(k, "-")) for r in runs]] for k in differ]
    return section("Configuration differences", table(["key", *[r.name for r in runs]], rows),
                   "config.yaml keys whose values differ between the runs; '-': the run's config has no such key")


def _curve_keys(runs: Sequence[RunSource]) -> list[str]:
    """The validation metrics, then the validation and training losses, of the runs' logs."""
    keys = {k for r in runs for k in r.curves}
    ordered = sorted(k for k in keys if k.startswith("val/") and "loss" not in k) + \
        sorted(k for k in keys if "loss" in k and (k.startswith("val/") or k == "train/loss_epoch"))
    return ordered[:MAX_CURVES]


def curves_section(runs: Sequence[RunSource]) -> str:
    """A panel per logged metric (validation metrics, then losses), a line per run, by epoch."""
    keys = _curve_keys(runs)
    if not keys:
        return section("Curves", "<p>No per-epoch log (csv/metrics.csv) in these runs.</p>")
    cols = min(3, len(keys))
    nrows = -(-len(keys) // cols)
    fig = Figure(figsize=(4.2 * cols, 3.0 * nrows + 0.4))
    for i, key in enumerate(keys):
        ax = fig.add_subplot(nrows, cols, i + 1)
        for r in runs:
            points = sorted(r.curves.get(key, {}).items())
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", linewidth=1, label=r.name)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("epoch", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    legend_rows = math.ceil(len(labels) / 5)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=7)
    fig.subplots_adjust(left=0.06, right=0.98, top=0.94, hspace=0.45, wspace=0.25,
                        bottom=(0.12 + 0.05 * legend_rows) / (nrows + 0.2))
    return section("Curves", figure(figure_uri(fig, max_side=1100), "by epoch, one line per run"))


def compute_section(runs: Sequence[RunSource]) -> str:
    """Accuracy (or mAP) against GMACs, the Pareto front marked (``vision-attn compare --plot``'s figure)."""
    rows = compare([r.folder for r in runs], latency=False)
    if not any(r.metric is not None for r in rows):
        return ""
    return section("Accuracy against compute", figure(figure_uri(compare_figure(rows)),
                                                      "point area: parameters; dashed: Pareto front"))


def _interval_figure(ab: AblationSource) -> Figure | None:
    """Each variant's paired difference against none, per metric, with its 95% interval (percentage points)."""
    metrics = ab.report.get("metrics", {})
    variants = [v for v in ab.report.get("variants", []) if v["variant"] != "none"]
    if not variants or not metrics:
        return None
    fig = Figure(figsize=(4.2 * len(metrics), 0.5 * len(variants) + 1.6))
    for i, (key, label) in enumerate(metrics.items()):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        for y, v in enumerate(variants):
            d = (v.get("difference_vs_none") or {}).get(key)
            if not d:
                continue
            low, high = d.get("low"), d.get("high")
            err = [[100 * (d["mean"] - low)], [100 * (high - d["mean"])]] if low is not None else None
            ax.errorbar([100 * d["mean"]], [y], xerr=err, fmt="o", capsize=4)
        ax.axvline(0, color="grey", linewidth=1)
        ax.set_yticks(range(len(variants)), [v["variant"] for v in variants], fontsize=8)
        ax.set_xlabel(f"{label}: difference vs none (points)", fontsize=8)
        ax.set_ylim(-0.7, len(variants) - 0.3)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def ablation_section(ab: AblationSource) -> str:
    """An ablation's table (mean, std and the paired difference against none with its 95% interval, per
    metric) and its intervals."""
    metrics = ab.report.get("metrics", {})
    header = ["variant", "seeds", "params", "GMACs"]
    for label in metrics.values():
        header += [f"{label} mean %", f"{label} std", f"{label} vs none", f"{label} 95% CI"]
    rows = []
    for v in ab.report.get("variants", []):
        row: list[Any] = [v["variant"], len(v.get("seeds", [])), f"{v.get('params', 0):,}", f"{v.get('gmacs', 0):.4g}"]
        for key in metrics:
            s = v.get("summary", {}).get(key, {})
            d = (v.get("difference_vs_none") or {}).get(key)
            row += [f"{100 * s['mean']:.2f}" if s.get("mean") is not None else "",
                    f"{100 * s['std']:.2f}" if s.get("std") is not None else "",
                    f"{100 * d['mean']:+.2f}" if d else "",
                    f"[{100 * d['low']:+.2f}, {100 * d['high']:+.2f}]" if d and d.get("low") is not None else ""]
        rows.append(row)
    fig = _interval_figure(ab)
    body = table(header, rows) + (figure(figure_uri(fig, max_side=900), "paired difference against none, 95% "
                                         "Student-t interval over seeds; an interval across 0: no difference shown")
                                  if fig is not None else "")
    seeds, epochs = ab.report.get("seeds", []), ab.report.get("epochs")
    note = f"{ab.report.get('task', '')} ablation of {ab.report.get('config', '')}: seeds {seeds}" + \
        (f", {epochs} epochs" if epochs else "") + (f"; not finished: {', '.join(ab.report['missing'])}"
                                                   if ab.report.get("missing") else "")
    return section(f"Ablation {ab.name}", body, note)


def run_figures_section(runs: Sequence[RunSource]) -> str:
    """Each run's own figures (confusion matrix, predictions), side by side."""
    cards = [figure(image_uri(path), f"{r.name}: {caption}", small=True) for r in runs for caption, path in r.figures]
    if not cards:
        return ""
    return section("Each run's figures", "".join(cards))
