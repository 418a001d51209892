"""What pruning buys a search: `vision-attn search` over 4 attention blocks x 4 insertion sites (16 trials,
the grid sampler, so both searches try the same 16 configurations) on the demo detector, once with every
trial trained fully (``--pruner none``) and once with successive halving on the per-epoch validation; the
wall time of each, their ratio, and whether the pruned search's best configuration is within the seed
interval (Student t, 95%, ``ablate``'s statistics) of the full grid's best, re-trained over seeds by
`vision-attn ablate`. The pruned best's accuracy is its full training's (the full grid trained every
configuration with the same seed).

    python tools/bench.py search            # the demo detector as its config says, 3 seeds
    python tools/bench.py search --quick    # 2 blocks x 2 sites, 3 epochs of 2 batches at 64 px: a smoke test
"""
from __future__ import annotations

import shlex
import tempfile
import time
from pathlib import Path

from tools.suites.harness import Param, Suite


def run(p, record) -> None:
    import optuna

    from vision_attn.ablation import make_plan
    from vision_attn.ablation.execute import run_ablation
    from vision_attn.ablation.report import build_report
    from vision_attn.ablation.stats import paired_difference
    from vision_attn.search import run_search

    blocks, sites = p.blocks.split(","), p.sites.split(";")
    extra = shlex.split(p.train_args) + ["--trainer.check_val_every_n_epoch", "1",  # a pruning decision each epoch
                                         "--trainer.enable_progress_bar", "false"]
    n = len(blocks) * len(sites)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(p.out) if p.out else Path(tmp)
        space = out / "space.yaml"
        out.mkdir(parents=True, exist_ok=True)
        space.write_text(f"blocks: [{', '.join(blocks)}]\nsites: [{', '.join(repr(s) for s in sites)}]\n")
        results = {}
        for pruner in ("none", p.pruner):
            start = time.perf_counter()
            result = run_search(p.config, space, trials=n, out=out / pruner, sampler="grid", pruner=pruner,
                                epochs=p.epochs, extra=extra, latency=False, echo=lambda line: None)
            seconds = time.perf_counter() - start
            trials = result.study.get_trials(deepcopy=False)
            done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
            pruned = [t for t in trials if t.state == optuna.trial.TrialState.PRUNED]
            epochs = sum(int(t.user_attrs.get("epochs") or 0) for t in done + pruned)
            best = max(done, key=lambda t: t.values[0])
            results[pruner] = {"seconds": seconds, "complete": len(done), "pruned": len(pruned), "epochs": epochs,
                               "best": best.params, "best_value": best.values[0],
                               "values": {f"{t.params['block']}@{t.params['site']}": t.values[0] for t in done}}
            record.line(f"pruner {pruner}: {seconds:.0f} s, {len(done)} complete, {len(pruned)} pruned, {epochs} epochs "
                        f"trained; best {best.params['block']}@{best.params['site']} {best.values[0]:.4f}")
        full, fast = results["none"], results[p.pruner]
        ratio = fast["seconds"] / full["seconds"]
        best = full["best"]
        plan = make_plan(p.config, [best["block"]], seeds=p.seeds, name="best", runs_dir=out, sites=best["site"],
                         epochs=p.epochs, extra=extra)
        run_ablation(plan, echo=lambda line: None)
        report = build_report(plan, latency=False)
        key = report.to_dict()["metrics"]
        key = next(iter(key))
        seeds = next(v for v in report.variants if v.variant != "none").values[key]
        interval = paired_difference(seeds, {s: 0.0 for s in seeds})  # the mean's Student-t interval
        fast_best = f"{fast['best']['block']}@{fast['best']['site']}"
        fast_full_value = full["values"][fast_best]  # its full training, same seed
        within = interval.low is not None and interval.low <= fast_full_value <= interval.high
        record.results.update({"full": full, "pruned": fast, "time_ratio": ratio,
                               "epochs_ratio": fast["epochs"] / full["epochs"],
                               "full_best_over_seeds": {str(s): v for s, v in seeds.items()},
                               "interval": interval.to_dict(), "pruned_best_full_value": fast_full_value,
                               "within_interval": within})
        record.table(["search", "seconds", "complete", "pruned", "epochs trained", "best", key],
                     [["full grid", round(full["seconds"]), full["complete"], full["pruned"], full["epochs"],
                       f"{best['block']}@{best['site']}", round(full["best_value"], 4)],
                      [f"pruned ({p.pruner})", round(fast["seconds"]), fast["complete"], fast["pruned"],
                       fast["epochs"], fast_best, round(fast["best_value"], 4)]])
        record.line(f"time of the pruned search / the full grid: {ratio:.2f} (target <= 0.40); epochs trained: "
                    f"{fast['epochs'] / full['epochs']:.2f} (the share the machine's load cannot sway)")
        record.line(f"full grid's best over {len(seeds)} seeds: mean {interval.mean:.4f}, 95% interval "
                    f"[{interval.low:.4f}, {interval.high:.4f}]; pruned search's best {fast_best} trained fully: "
                    f"{fast_full_value:.4f} -> {'within' if within else 'outside'} the interval")


SUITE = Suite("search", "a 16-trial search with pruning against the same 16 trials trained fully (demo detector)", run, (
    Param("config", "demo_digit_boxes", "a detector training config"),
    Param("blocks", "SE,CBAM,ECA,CoordAtt", "attention blocks, comma-separated", quick="SE,ECA"),
    Param("sites", "backbone;neck;all;4,6", "insertion sites, semicolon-separated (as ablate names them)",
          quick="backbone;neck"),
    Param("epochs", 14, "epochs of a full trial", quick=3),
    Param("seeds", 3, "seeds the full grid's best is re-trained over", quick=2),
    Param("pruner", "halving", "the pruned search's pruner", choices=["halving", "hyperband"]),
    Param("train_args", "", "arguments for every training",
          quick="--trainer.limit_train_batches 2 --trainer.limit_val_batches 1 --data.img_size 64 "
                "--data.batch_size 16 --data.num_workers 0"),
    Param("out", "", "keep the searches' folders here (default: a temporary folder)"),
), doc=__doc__)
