"""Token merging (ToMe) on the CPU: inference throughput of a ViT with `token_merging=r` against the
plain model (both as `vision-attn benchmark` runs ours: `kernels.accelerate`, PyTorch's kernels, the
plain model's blocks as one native encoder-layer op each), alternating in one process; and, given a
trained classifier run, top-1 at each rate off the shelf and after a short fine-tune with merging on.
With ``--run`` the network timed is the run's, at its image size (``--model`` and ``--img-size`` are
then unused); ``--clock cpu`` with ``--threads 1`` times this process's CPU time (a loaded machine).

    python tools/bench.py token_merging --model vit_small_patch16_224 --batch 8 --rates 8 13 16 --rounds 5
    python tools/bench.py token_merging --run runs/demo_digits --rates 1 2 --epochs 5 --rounds 0
    python tools/bench.py token_merging --run runs/digits_tokens --rates 9 18 --epochs 5 --threads 1 --clock cpu
"""
from __future__ import annotations

import copy

from tools.suites.harness import CLOCKS, Param, Suite, alternate, median_ms, median_ratio


def _network(p):
    """The plain network timed, its name and its input (height, width): the run's (``--run``), else
    ``--model`` at ``--img-size``."""
    import vision_attn
    from vision_attn.tasks import load_run

    if p.run:
        run_ = load_run(p.run)
        return run_.model.eval(), run_.label, tuple(run_.img_size)
    return vision_attn.create_model(p.model).eval(), p.model, (p.img_size, p.img_size)


def _speed(p, record) -> None:
    import torch

    from vision_attn.kernels import accelerate, kernel_plan

    torch.set_num_threads(p.threads)
    plain, name, hw = _network(p)
    models = {"r=0": plain}
    for r in p.rates:
        merged = copy.deepcopy(plain)
        merged.set_token_merging(r)
        models[f"r={r}"] = merged
    for m in models.values():
        accelerate(m, kernels=False)
    x = torch.randn(p.batch, 3, *hw)
    with torch.no_grad(), kernel_plan("aten"):
        times = alternate({k: (lambda m=m: m(x)) for k, m in models.items()}, p.rounds, iters=p.iters,
                          warmup_calls=1, rotate=True, clock=CLOCKS[p.clock])
        tokens = {k: m.forward_features(x[:1]).shape[1] for k, m in models.items()}
    ms = median_ms(times)
    rows = []
    for k in models:
        speedup = median_ratio(times, "r=0", k)
        record.add("speed", {"model": name, "img_size": list(hw), "rate": k, "batch": p.batch, "ms": ms[k],
                             "tokens_out": tokens[k], "speedup": speedup, "clock": p.clock, "threads": p.threads})
        rows.append([name, k, p.batch, f"{ms[k]:.1f}", f"{1e3 * p.batch / ms[k]:.1f}", tokens[k], f"{speedup:.2f}x"])
    record.table(["model", "rate", "batch", "ms a call", "images/s", "tokens after the last block",
                  "speed-up (median of rounds)"], rows, title=f"{hw[0]}x{hw[1]} px, {p.threads} threads, {p.clock} time")


def merged_runtime(r):
    """The ``eval`` runtime (``vision_attn.tasks.runs.Runtime``) of a ViT with ``r`` tokens merged per block:
    a copy of the run's network with ``set_token_merging(r)``, run in PyTorch."""
    def build(model, hw, calibration):
        twin = copy.deepcopy(model)
        twin.set_token_merging(r)
        return twin
    return build


def _accuracy(p, record) -> None:
    import tempfile

    from vision_attn.tasks import evaluate_classifier, train

    run, data = p.run, p.data
    rows = []
    plain = evaluate_classifier(f"{run}/best.ckpt", data)["top1"]
    rows.append(["0", f"{100 * plain:.2f}%", ""])
    for r in p.rates:
        shelf = evaluate_classifier(f"{run}/best.ckpt", data, runtime=merged_runtime(r))["top1"]
        tuned = None
        if p.epochs:
            with tempfile.TemporaryDirectory(prefix="tome-") as out:
                train("cls", ["--config", f"{run}/config.yaml", "--model.model_kwargs.token_merging", str(r),
                              "--model.pretrained", f"{run}/best.ckpt", "--trainer.max_epochs", str(p.epochs),
                              "--model.lr", str(p.lr), "--model.warmup_epochs", "0", "--runs_dir", out, "--name", "tome"])
                tuned = evaluate_classifier(f"{out}/tome/best.ckpt", data)["top1"]
        record.add("accuracy", {"run": run, "rate": r, "top1_plain": plain, "top1_off_the_shelf": shelf,
                                "top1_fine_tuned": tuned, "epochs": p.epochs})
        rows.append([str(r), f"{100 * shelf:.2f}%", "" if tuned is None else f"{100 * tuned:.2f}%"])
    record.table(["rate", "top-1 off the shelf", f"top-1 after {p.epochs} epochs with merging"], rows,
                 title=f"{run} on {data}")


def run(p, record) -> None:
    if p.rounds:
        _speed(p, record)
    if p.run:
        _accuracy(p, record)


SUITE = Suite("token_merging", "ToMe: throughput against the plain ViT, and top-1 before and after a fine-tune", run, (
    Param("model", "vit_small_patch16_224", "the ViT to time", quick="vit_tiny_patch16_224"),
    Param("img_size", 224, "image size", quick=64),
    Param("batch", 8, "batch size", quick=2),
    Param("rates", [8, 13, 16], "tokens merged per block", quick=[2]),
    Param("rounds", 5, "timed rounds (0: no timing)", quick=1),
    Param("iters", 2, "calls a round", quick=1),
    Param("threads", 2, "torch threads"),
    Param("clock", "wall", "wall time, or cpu: this process's CPU time (with --threads 1, figures that other work "
          "on a loaded machine cannot inflate)", choices=("wall", "cpu")),
    Param("run", "", "a trained classifier run folder for the accuracy rows (empty: none)"),
    Param("data", "demo:digits", "the run's data (its val split is evaluated)"),
    Param("epochs", 5, "fine-tune epochs with merging on (0: off the shelf only)"),
    Param("lr", 2e-4, "fine-tune learning rate"),
), doc=__doc__)
