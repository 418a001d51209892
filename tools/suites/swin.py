"""vision_attn's Swin against timm's, same weights, in one process, alternating.

    python tools/bench.py swin --rounds 7 --iters 3 --train-rounds 7                          # 2 threads, wall clock
    python tools/bench.py swin --threads 1 --clock cpu --rounds 7 --iters 3 --train-rounds 7  # 1 thread, CPU time
    python tools/bench.py swin --model swinv2_tiny_window8_256 --img-size 256 --train-batch 8 --threads 2

Two measurements, each ours against timm with the same weights:

- inference: ``--batch`` images (default 8) under ``torch.inference_mode``, ``--iters`` passes a round;
- training: one step on ``--train-batch`` images (default 16): forward, cross-entropy, backward and
  an SGD step, in training mode (stochastic depth 0.1 in both), ``--train-iters`` steps a round.

Throughput: the order of the two models alternates between rounds after a warm-up; the figure to
quote is the median over rounds of ours/timm. Memory: the peak of live tensor storage during one
pass / one step, tracked op by op (deterministic, see vision_attn/analysis/benchmark.py), and the peak
of the resident set above the built model over two passes / steps, in a fresh process per model
(median over ``--mem-runs`` processes). Outputs are compared first: the benchmark is void if the two
models disagree. ``--clock cpu`` is the calling thread's CPU time (with ``--threads 1``: robust to
other processes).
"""
from __future__ import annotations

import os
import statistics
import tempfile

import torch
import torch.nn.functional as F

from tools.suites.harness import CLOCKS, Param, Suite, alternate, in_fresh_process, log


def build(which: str, name: str, weights: str) -> torch.nn.Module:
    """Build ``which`` ('ours' or 'timm') and load the weights in ``weights`` (timm's layout).
    timm's Swin keeps index and mask buffers that a meta-device build would leave empty: built on the CPU.
    Ours on the CPU fast paths (:func:`vision_attn.kernels.accelerate`)."""
    import timm

    import vision_attn
    from vision_attn.kernels import accelerate

    model = vision_attn.create_model(name) if which == "ours" else timm.create_model(name)
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    return accelerate(model) if which == "ours" else model


class Steps:
    """The inference pass and the training step of one model, on fixed inputs."""

    def __init__(self, model: torch.nn.Module, batch: int, train_batch: int, img: int) -> None:
        self.model = model
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(batch, 3, img, img, generator=g)
        self.xt = torch.randn(train_batch, 3, img, img, generator=g)
        self.yt = torch.randint(0, 1000, (train_batch,), generator=g)
        self.opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    def infer(self) -> torch.Tensor:
        self.model.eval()
        with torch.inference_mode():
            return self.model(self.x)

    def train(self) -> None:
        self.model.train()
        loss = F.cross_entropy(self.model(self.xt), self.yt)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def measure_memory(which: str, name: str, weights: str, batch: int, train_batch: int, img: int,
                   threads: int | None, mode: str) -> float:
    """In a fresh process: the resident-set rise of one pass or step."""
    from vision_attn.analysis.benchmark import rss_peak_mb

    if threads:
        torch.set_num_threads(threads)
    steps = Steps(build(which, name, weights), batch, train_batch, img)
    return rss_peak_mb(steps.infer if mode == "infer" else steps.train)


def run(p, record) -> None:
    import timm

    from vision_attn.analysis.benchmark import tensor_peak_mb

    if p.threads:
        torch.set_num_threads(p.threads)
    if p.clock == "cpu" and torch.get_num_threads() != 1:
        raise SystemExit("--clock cpu measures the calling thread only: use it with --threads 1")
    torch.manual_seed(0)
    result = record.results
    result.update({"model": p.model, "img_size": p.img_size, "threads": torch.get_num_threads(), "clock": p.clock})
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, "w.pth")
        src = timm.create_model(p.model)
        with torch.no_grad():  # non-trivial values everywhere (Swin V2 starts its post-norms at zero)
            for q in src.parameters():
                q.add_(torch.randn_like(q), alpha=0.02 if q.ndim > 1 else 0.1)
        torch.save(src.state_dict(), weights)
        models = {"timm": build("timm", p.model, weights), "ours": build("ours", p.model, weights)}
        steps = {k: Steps(m, p.batch, p.train_batch, p.img_size) for k, m in models.items()}
        diff = (steps["timm"].infer() - steps["ours"].infer()).abs().max().item()
        assert diff <= 1e-4, f"outputs differ by {diff}: the comparison is void"
        result["max_abs_diff"] = diff

        for mode, batch, rounds, iters in (("infer", p.batch, p.rounds, p.iters),
                                           ("train", p.train_batch, p.train_rounds, p.train_iters)):
            if p.skip == mode:
                continue
            fns = {k: getattr(s, mode) for k, s in steps.items()}
            log(f"{mode}, batch {batch}:")
            times = alternate(fns, rounds, iters=iters, warmup_calls=1, log=log,
                              clock=CLOCKS["thread" if p.clock == "cpu" else "wall"])
            rates = {k: [batch / t for t in v] for k, v in times.items()}
            peak = {k: tensor_peak_mb(fn) for k, fn in fns.items()}
            rss = {which: statistics.median(
                in_fresh_process(measure_memory, which, p.model, weights, p.batch, p.train_batch, p.img_size,
                                 p.threads, mode) for _ in range(p.mem_runs)) for which in ("timm", "ours")}
            ratios = [o / t for o, t in zip(rates["ours"], rates["timm"])]
            result[mode] = {"batch": batch, "rounds": rounds, "iters": iters,
                            "timm_img_s_median": statistics.median(rates["timm"]),
                            "ours_img_s_median": statistics.median(rates["ours"]),
                            "ratio_median": statistics.median(ratios), "ratios": [round(r, 3) for r in ratios],
                            "tensor_peak_mb": peak, "rss_peak_mb": rss}

    record.line(f"{p.model} at {p.img_size} px, {result['threads']} threads, {p.clock} clock, max abs diff {diff:.1e}")
    for mode in ("infer", "train"):
        if mode not in result:
            continue
        r = result[mode]
        what = "inference" if mode == "infer" else "training step (fwd + bwd + SGD)"
        record.line(f"  {what}, batch {r['batch']}, {r['rounds']} alternating rounds x {r['iters']}:")
        record.line(f"    timm {r['timm_img_s_median']:.2f} img/s, ours {r['ours_img_s_median']:.2f} img/s, "
                    f"median ratio ours/timm {r['ratio_median']:.3f} (rounds {r['ratios']})")
        record.line(f"    peak tensor memory: timm {r['tensor_peak_mb']['timm']:.1f} MiB, "
                    f"ours {r['tensor_peak_mb']['ours']:.1f} MiB")
        record.line(f"    peak resident set above the built model: timm {r['rss_peak_mb']['timm']:.1f} MiB, "
                    f"ours {r['rss_peak_mb']['ours']:.1f} MiB")


SUITE = Suite("swin", "Swin inference and training step against timm's: throughput, tensor and resident memory", run, (
    Param("model", "swin_tiny_patch4_window7_224", "model name"),
    Param("batch", 8, "inference batch", quick=1),
    Param("train_batch", 16, "training batch", quick=1),
    Param("img_size", 224, "pixels"),
    Param("rounds", 7, "inference rounds", quick=1),
    Param("iters", 3, "inference passes a round", quick=1),
    Param("train_rounds", 5, "training rounds", quick=1),
    Param("train_iters", 1, "training steps a round"),
    Param("mem_runs", 3, "fresh processes for the resident-set figure", quick=1),
    Param("skip", "", "leave one measurement out", choices=["", "train", "infer"]),
    Param("threads", 0, "torch threads (0: torch's choice, one per core)"),
    Param("clock", "wall", "wall time, or cpu: the calling thread's CPU time (with --threads 1)",
          choices=["wall", "cpu"]),
), requires=("timm",), doc=__doc__)
