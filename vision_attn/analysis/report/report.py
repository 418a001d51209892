"""``vision-attn report RUNS_OR_ABLATIONS... -o report.html``: runs and ablations on one self-contained page
(readable offline: every picture embedded, no script, font or style fetched): the configuration
differences, the metrics table, an ablation's paired intervals, curves, accuracy against GMACs, each
run's confusion matrix or predictions and, for ``images``, the runs' class-activation maps side by side."""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from vision_attn.analysis.explain import chosen_method, explained_figures
from vision_attn.analysis.report.embed import figure_uri
from vision_attn.analysis.report.page import figure, page, section
from vision_attn.analysis.report.sections import (ablation_section, compute_section, config_section, curves_section,
                                                  metrics_section, run_figures_section)
from vision_attn.analysis.report.sources import AblationSource, RunSource, read_sources
from vision_attn.errors import ConfigError
from vision_attn.io.atomic import write_text
from vision_attn.tasks import load_run

__all__ = ["HtmlReport", "html_report", "write_html_report", "MAX_MAP_RUNS"]

MAX_MAP_RUNS = 4
"""Runs whose maps a report draws side by side (an ablation's: the first seed of each variant)."""


@dataclass(frozen=True)
class HtmlReport:
    """The written ``path``, its size in ``bytes``, and how many runs, ablations and images it shows."""

    path: Path
    bytes: int
    runs: int
    ablations: int
    images: int


def _map_runs(runs: Sequence[RunSource], ablations: Sequence[AblationSource]) -> list[RunSource]:
    if ablations:  # one run per variant: the first seed's
        seen, picked = set(), []
        for ab in ablations:
            for r in ab.runs:
                variant = r.name.rsplit("-s", 1)[0]
                if (ab.name, variant) not in seen:
                    seen.add((ab.name, variant))
                    picked.append(r)
        return picked[:MAX_MAP_RUNS]
    return list(runs[:MAX_MAP_RUNS])


def _maps_section(runs: Sequence[RunSource], images: Sequence[str | os.PathLike], method: str | None) -> str:
    loaded = [load_run(r.folder) for r in runs]
    method = chosen_method(loaded[0], method)
    for run, source in zip(loaded, runs):
        run.label = source.name
    cards = [figure(figure_uri(fig, max_side=900), f"{path.name}: {', '.join(t['label'] for t in found) or '-'}")
             for path, fig, _, found in explained_figures(loaded, images, method=method, top_k=1)]
    return section(f"Where the runs look ({method})", "".join(cards),
                   "one row per target (the first run's prediction), a column per run, the same colour scale")


def html_report(paths: Sequence[str | os.PathLike], *, images: Sequence[str | os.PathLike] = (),
                method: str | None = None, title: str | None = None) -> tuple[str, int, int]:
    """The page's HTML for run and ablation folders ``paths``, and how many runs and ablations it shows."""
    if not paths:
        raise ConfigError("report: give run folders or ablation folders")
    runs, ablations = read_sources(paths)
    sections = [ablation_section(ab) for ab in ablations]
    sections += [metrics_section(runs), config_section(runs), curves_section(runs), compute_section(runs)]
    if images:
        sections.append(_maps_section(_map_runs(runs, ablations), images, method))
    sections.append(run_figures_section(runs))
    name = title or ", ".join(Path(p).name for p in paths)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    note = f"{len(runs)} run(s), {len(ablations)} ablation(s); written by vision-attn report on {when}"
    return page(f"vision_attn report: {name}", [s for s in sections if s], note), len(runs), len(ablations)


def write_html_report(paths: Sequence[str | os.PathLike], output: str | os.PathLike, *,
                      images: Sequence[str | os.PathLike] = (), method: str | None = None,
                      title: str | None = None) -> HtmlReport:
    """:func:`html_report` written to ``output`` (atomically: a failure keeps the old file)."""
    text, n_runs, n_ablations = html_report(paths, images=images, method=method, title=title)
    path = write_text(output, text, mkdir=True)
    return HtmlReport(path, len(text.encode()), n_runs, n_ablations, len(images))
