"""Means over seeds and paired differences with Student-t confidence intervals."""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from scipy import stats

__all__ = ["Summary", "PairedDifference", "summarise", "paired_difference"]


@dataclass(frozen=True)
class Summary:
    """``values`` over seeds: their mean and sample standard deviation (``None`` for one value)."""

    n: int
    mean: float
    std: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PairedDifference:
    """``variant - baseline`` over the seeds both have: the mean difference, its sample standard deviation
    and the ``level`` confidence interval of the mean (``mean +- t(level, n-1) * std / sqrt(n)``);
    ``low``/``high`` are ``None`` with fewer than two seeds."""

    n: int
    mean: float
    std: float | None
    low: float | None
    high: float | None
    level: float = 0.95

    @property
    def includes_zero(self) -> bool | None:
        return None if self.low is None or self.high is None else self.low <= 0.0 <= self.high

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "includes_zero": self.includes_zero}


def summarise(values: Sequence[float]) -> Summary:
    if not values:
        raise ValueError("no values to summarise")
    return Summary(len(values), statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None)


def paired_difference(variant: dict[int, float], baseline: dict[int, float], level: float = 0.95) -> PairedDifference | None:
    """The paired difference over the seeds (keys) both maps have; ``None`` when they share none."""
    seeds = sorted(set(variant) & set(baseline))
    if not seeds:
        return None
    d = [variant[s] - baseline[s] for s in seeds]
    mean = statistics.fmean(d)
    if len(d) < 2:
        return PairedDifference(1, mean, None, None, None, level)
    std = statistics.stdev(d)
    half = float(stats.t.ppf(0.5 + level / 2, len(d) - 1)) * std / math.sqrt(len(d))
    return PairedDifference(len(d), mean, std, mean - half, mean + half, level)
