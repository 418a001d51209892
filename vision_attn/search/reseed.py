"""The front's configurations re-trained over seeds by `vision-attn ablate` (its plan, its runs, its report):
one ablation ``OUT/reseed-tNNNN`` per configuration of the front that has a block (``none`` is the
baseline of each), with the trial's scale and learning rate passed to every training, so that each reads
as "this block at this site against none, over seeds, with a 95% interval". Running it again continues
the ablations (finished runs are kept); one process should run it, after the search's workers are done.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from vision_attn.ablation import make_plan
from vision_attn.ablation.execute import run_ablation
from vision_attn.ablation.report import AblationReport, build_report, write_report
from vision_attn.errors import ConfigError
from vision_attn.search.front import Front
from vision_attn.search.trial import SearchSetup

__all__ = ["reseed_front"]


def reseed_front(front: Front, setup: SearchSetup, *, seeds: int, jobs: int = 1, latency: bool = True,
                 echo: Callable[[str], None] = print) -> list[tuple[AblationReport, dict[str, Path]]]:
    """Each configuration of ``front`` with a block, over ``seeds`` seeds against none; the reports written."""
    if seeds < 2:
        raise ConfigError(f"--reseed {seeds}: give at least 2 seeds (3 or more for an interval worth reading)")
    out = []
    for row in front.rows:
        if row.block == "none":
            continue
        extra = list(setup.extra)
        if row.scale is not None:
            extra += ["--model.scale", row.scale]
        if row.lr is not None:
            extra += ["--model.lr", repr(row.lr)]
        plan = make_plan(str(setup.config), [row.block], seeds=seeds, name=f"reseed-t{row.trial:04d}",
                         runs_dir=setup.out, sites=str(row.site), epochs=setup.epochs, extra=extra)
        echo(f"re-training trial {row.trial} ({row.block} at {row.site}) and none over {seeds} seeds in {plan.folder}")
        failed = [s.spec.name for s in run_ablation(plan, jobs=jobs, echo=echo) if s.status == "failed"]
        if failed:
            raise ConfigError(f"{len(failed)} re-training(s) failed: {', '.join(failed)}; their logs are in "
                              f"{plan.folder / 'logs'}; run the same command again to retry them")
        report = build_report(plan, latency=latency)
        out.append((report, write_report(report)))
        for sentence in report.sentences():
            echo(sentence)
    return out
