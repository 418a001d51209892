"""What a report is made of: run folders (``metrics.json``, ``config.yaml``, ``csv/metrics.csv`` and the
figures a run wrote) and ablation folders (``ablation.json`` from ``vision-attn ablate``, and the run
folders inside), read as data."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from vision_attn.analysis.compare import read_run_metrics
from vision_attn.errors import DataError
from vision_attn.io.json import read_json
from vision_attn.io.yaml import read_yaml
from vision_attn.tasks.plots import epoch_history

__all__ = ["RunSource", "AblationSource", "read_sources", "RUN_FIGURES"]

RUN_FIGURES = (("confusion.png", "confusion matrix"), ("predictions.png", "predictions (white: ground truth)"),
               ("pr_curve.png", "precision-recall"))
"""The figures of a run folder a report shows, when the run wrote them."""


@dataclass
class RunSource:
    """One run: ``name`` (the folder's), its ``folder``, ``metrics`` (metrics.json), ``config`` (config.yaml,
    flattened to dotted keys), ``curves`` (per logged metric, its value by epoch) and ``figures``
    (caption, file) it wrote."""

    name: str
    folder: Path
    metrics: dict[str, Any]
    config: dict[str, Any]
    curves: dict[str, dict[int, float]]
    figures: list[tuple[str, Path]] = field(default_factory=list)


@dataclass
class AblationSource:
    """One ablation: its ``folder``, ``ablation.json`` (``report``) and its finished runs."""

    name: str
    folder: Path
    report: dict[str, Any]
    runs: list[RunSource]


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: value}


def read_run(folder: Path) -> RunSource:
    metrics = read_run_metrics(folder)
    config_file = folder / "config.yaml"
    config = _flatten(read_yaml(config_file, what="the run's config")) if config_file.is_file() else {}
    figures = [(caption, folder / name) for name, caption in RUN_FIGURES if (folder / name).is_file()]
    return RunSource(folder.name, folder, metrics, config, epoch_history(folder / "csv" / "metrics.csv"), figures)


def read_sources(paths: Sequence[str | os.PathLike]) -> tuple[list[RunSource], list[AblationSource]]:
    """Every run (those of each ablation included, in its order) and every ablation among ``paths``."""
    runs: list[RunSource] = []
    ablations: list[AblationSource] = []
    for spec in paths:
        folder = Path(spec)
        if (folder / "ablation.json").is_file():
            report = read_json(folder / "ablation.json", what="the ablation's report", max_bytes=64 << 20)
            members = [read_run(folder / f"{v['variant']}-s{s}") for v in report.get("variants", [])
                       for s in v.get("seeds", []) if (folder / f"{v['variant']}-s{s}" / "metrics.json").is_file()]
            ablations.append(AblationSource(folder.name, folder, report, members))
            runs.extend(members)
        elif folder.is_dir() and (folder / "metrics.json").is_file():
            runs.append(read_run(folder))
        else:
            raise DataError(f"{folder}: neither a run folder (metrics.json) nor an ablation folder (ablation.json); "
                            "give finished runs or ablations")
    return runs, ablations
