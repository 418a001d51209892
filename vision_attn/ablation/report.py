"""An ablation's report, from the run folders that exist: per variant the mean and standard deviation over
seeds of the task's metrics, parameters, GMACs, latency at batch 1 and training time; the paired
difference of each metric against ``none`` with its 95% confidence interval and a plain sentence; written
as ``ablation.json`` (every number), ``ablation.md``, ``ablation.csv``, ``ablation.png`` (the task's
primary metric against GMACs, error bars one standard deviation) and ``report.html`` (all of it and the runs'
curves and figures on one self-contained page).
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from vision_attn.ablation.plan import AblationPlan
from vision_attn.ablation.stats import PairedDifference, Summary, paired_difference, summarise
from vision_attn.analysis.compare import compare, read_run_metrics
from vision_attn.analysis.report import write_html_report
from vision_attn.errors import DataError
from vision_attn.io.atomic import save_figure, write_json, write_text
from vision_attn.tasks.registry import get_task

__all__ = ["metrics_of", "VariantReport", "AblationReport", "build_report", "write_report"]


def metrics_of(task: str) -> tuple[tuple[str, str], ...]:
    """The ``metrics.json`` keys (fractions) an ablation of ``task`` reports, with their labels: the task's
    primary metric first (the one plotted), then its other ``headline`` ones (``Task.reported``)."""
    return get_task(task).reported


@dataclass
class VariantReport:
    """One variant over its finished seeds; ``values[key][seed]`` the metric of each run."""

    variant: str
    seeds: list[int]
    values: dict[str, dict[int, float]]
    summaries: dict[str, Summary]
    params: int
    gmacs: float
    latency_ms: float | None
    train_seconds: Summary
    differences: dict[str, PairedDifference | None] = field(default_factory=dict)


@dataclass
class AblationReport:
    plan: AblationPlan
    variants: list[VariantReport]
    missing: list[str]  # runs of the plan without metrics.json

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.plan.name, "task": self.plan.task, "config": self.plan.config, "sites": self.plan.sites,
            "after": self.plan.where, "seeds": self.plan.seeds, "epochs": self.plan.epochs, "missing": self.missing,
            "metrics": {k: label for k, label in metrics_of(self.plan.task)},
            "variants": [{
                "variant": v.variant, "seeds": v.seeds, "params": v.params, "gmacs": v.gmacs, "latency_ms": v.latency_ms,
                "values": {k: {str(s): x for s, x in vals.items()} for k, vals in v.values.items()},
                "summary": {k: s.to_dict() for k, s in v.summaries.items()},
                "train_seconds": v.train_seconds.to_dict(),
                "difference_vs_none": {k: (d.to_dict() if d else None) for k, d in v.differences.items()},
            } for v in self.variants],
        }

    def sentences(self) -> list[str]:
        """One plain sentence per variant and metric: the difference against none and what it means."""
        out = []
        for v in self.variants[1:]:
            for key, label in metrics_of(self.plan.task):
                d = v.differences.get(key)
                if d is None:
                    continue
                change = f"{v.variant} - none, {label}: {100 * d.mean:+.2f} points"
                if d.low is None:
                    out.append(f"{change} on one seed: no interval; run more seeds to tell it from noise.")
                elif d.includes_zero:
                    out.append(f"{change} (95% CI {100 * d.low:+.2f} to {100 * d.high:+.2f}, {d.n} seeds): the interval "
                               f"includes zero, so these runs cannot tell {v.variant} from none.")
                else:
                    word = "better" if d.mean > 0 else "worse"
                    out.append(f"{change} (95% CI {100 * d.low:+.2f} to {100 * d.high:+.2f}, {d.n} seeds): {v.variant} "
                               f"is {word} than none beyond the seed-to-seed noise of these runs.")
        return out

    def rows(self) -> list[dict[str, Any]]:
        """The table: one row per variant, metrics in percent."""
        rows = []
        for v in self.variants:
            row: dict[str, Any] = {"variant": v.variant, "seeds": len(v.seeds), "params": v.params,
                                   "GMACs": round(v.gmacs, 4),
                                   "latency ms (batch 1)": None if v.latency_ms is None else round(v.latency_ms, 2)}
            for key, label in metrics_of(self.plan.task):
                s = v.summaries[key]
                row[f"{label} mean %"] = round(100 * s.mean, 2)
                row[f"{label} std"] = None if s.std is None else round(100 * s.std, 2)
                d = v.differences.get(key)
                row[f"{label} vs none"] = None if d is None else round(100 * d.mean, 2)
                row[f"{label} 95% CI"] = (None if d is None or d.low is None
                                          else f"[{100 * d.low:+.2f}, {100 * d.high:+.2f}]")
            row["train s (mean)"] = round(v.train_seconds.mean, 1)
            rows.append(row)
        return rows

    def markdown(self) -> str:
        rows = self.rows()
        cols = list(rows[0])
        fmt = lambda x: "" if x is None else (f"{x:,}" if isinstance(x, int) else str(x))  # noqa: E731
        lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
        lines += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]
        text = "\n".join(lines) + "\n\n" + "\n".join(f"- {s}" for s in self.sentences()) + "\n"
        if self.missing:
            text += f"\nNot finished (left out): {', '.join(self.missing)}\n"
        return text

    def csv(self) -> str:
        rows = self.rows()
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue()


def build_report(plan: AblationPlan, *, latency: bool = True) -> AblationReport:
    """The report of the runs of ``plan`` that have finished (each variant needs at least one)."""
    keys = metrics_of(plan.task)
    by_variant: dict[str, list[tuple[int, dict[str, Any], Path]]] = {v: [] for v in plan.variants}
    missing = []
    for spec in plan.runs():
        if (spec.folder / "metrics.json").is_file():
            by_variant[spec.variant].append((spec.seed, read_run_metrics(spec.folder), spec.folder))
        else:
            missing.append(spec.name)
    variants = []
    for variant, runs in by_variant.items():
        if not runs:
            continue
        values = {}
        for key, _ in keys:
            values[key] = {seed: float(m[key]) for seed, m, _ in runs if isinstance(m.get(key), (int, float))}
            if not values[key]:
                raise DataError(f"{runs[0][2]}/metrics.json has no {key!r}: is this a {plan.task} run?")
        (row,) = compare([runs[0][2]], latency=latency)  # the same architecture for every seed
        variants.append(VariantReport(
            variant, [s for s, _, _ in runs], values, {k: summarise(list(v.values())) for k, v in values.items()},
            row.params, row.gmacs, row.latency_ms, summarise([float(m.get("fit_time_s") or 0.0) for _, m, _ in runs])))
    if not variants or variants[0].variant != "none":
        raise DataError(f"{plan.folder}: no finished run of the variant none yet, which every difference is against; "
                        f"finish the ablation (run the same `vision-attn ablate` again) or wait for it")
    base = variants[0]
    for v in variants[1:]:
        v.differences = {k: paired_difference(v.values[k], base.values[k]) for k, _ in keys}
    return AblationReport(plan, variants, missing)


def _plot(report: AblationReport, path: Path) -> Path:
    key, label = metrics_of(report.plan.task)[0]
    fig = Figure(figsize=(6.4, 4.6))
    ax = fig.add_subplot()
    base = report.variants[0].gmacs  # none: blocks add a fraction of a percent, so x is what they add
    for v in report.variants:
        s, x = v.summaries[key], 1000 * (v.gmacs - base)
        ax.errorbar([x], [100 * s.mean], yerr=[100 * (s.std or 0.0)], fmt="o", capsize=4, label=v.variant)
        ax.annotate(v.variant, (x, 100 * s.mean), textcoords="offset points", xytext=(6, 6), fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(6))
    ax.set_xlabel(f"MMACs per image added to none's {base:.4g} GMACs")
    ax.set_ylabel(f"{label} (%), mean +- std over seeds")
    ax.set_title(f"{report.plan.name}: {label} against compute")
    ax.grid(alpha=0.3)
    ax.margins(0.2)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def write_report(report: AblationReport) -> dict[str, Path]:
    """``ablation.json``, ``.md``, ``.csv`` and ``.png`` in the ablation's folder (each written atomically),
    then ``report.html``: the whole ablation on one page (:func:`vision_attn.analysis.report.write_html_report`)."""
    folder = report.plan.folder
    files = {
        "json": write_json(folder / "ablation.json", report.to_dict()),
        "markdown": write_text(folder / "ablation.md", report.markdown()),
        "csv": write_text(folder / "ablation.csv", report.csv()),
        "plot": _plot(report, folder / "ablation.png"),
    }
    files["html"] = write_html_report([folder], folder / "report.html").path
    return files
