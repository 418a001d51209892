"""vision_attn's ViT against timm's, same weights, in one process, alternating.

    python tools/bench.py vit --rounds 9                       # batch 8
    python tools/bench.py vit --rounds 9 --batch 1 --iters 10  # batch 1

Throughput: each round times timm then ours (the order alternates between rounds) over ``--iters``
forward passes after a warm-up; the figure to quote is the median over rounds of ours/timm.
Memory, two ways: (1) the peak of live tensor storage during one forward pass, tracked op by op
(deterministic; it sees the tensors the two implementations create, not allocator or code pages);
(2) the resident set: each model runs in a fresh process (built on the meta device, weights assigned
from the same file); after a warm-up pass of the same shape, a thread samples the resident set during
one pass, and the figure is its peak rise, median over ``--mem-runs`` processes.
Outputs are compared too: the benchmark is void if the two models disagree.
"""
from __future__ import annotations

import os
import statistics
import tempfile

import torch

from tools.suites.harness import Param, Suite, alternate, in_fresh_process, log


def build(which: str, name: str, weights: str | None, img_size: int = 224) -> torch.nn.Module:
    """Build ``which`` ('ours' or 'timm') at ``img_size`` on the meta device and assign weights from
    ``weights``; ours on the CPU fast paths (:func:`vision_attn.kernels.accelerate`)."""
    import timm

    import vision_attn
    from vision_attn.kernels import accelerate

    with torch.device("meta"):
        model = (vision_attn.create_model if which == "ours" else timm.create_model)(name, img_size=img_size)
    if weights is None:
        model = model.to_empty(device="cpu")
    else:
        model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True), assign=True)
    return (accelerate(model) if which == "ours" else model).eval()


def measure_memory(which: str, name: str, weights: str, batch: int, img: int) -> float:
    """Steady-state rise of the resident set during one forward pass (vision_attn.analysis.benchmark.rss_rise_mb)."""
    from vision_attn.analysis.benchmark import rss_rise_mb

    model = build(which, name, weights, img)
    x = torch.randn(batch, 3, img, img)
    with torch.inference_mode():
        return rss_rise_mb(lambda: model(x))


def run(p, record) -> None:
    import timm

    from vision_attn.analysis.benchmark import tensor_peak_mb

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, "w.pth")
        torch.save(timm.create_model(p.model, img_size=p.img_size).state_dict(), weights)
        models = {k: build(k, p.model, weights, p.img_size) for k in ("timm", "ours")}
        x = torch.randn(p.batch, 3, p.img_size, p.img_size)
        with torch.inference_mode():
            diff = (models["timm"](x) - models["ours"](x)).abs().max().item()
            assert diff <= 1e-4, f"outputs differ by {diff}: the comparison is void"
            times = alternate({k: (lambda m=m: m(x)) for k, m in models.items()}, p.rounds, iters=p.iters,
                              warmup_calls=2, log=log)
            tensor_peak = {k: tensor_peak_mb(lambda m=m: m(x)) for k, m in models.items()}
        mem = {which: statistics.median(in_fresh_process(measure_memory, which, p.model, weights, p.batch, p.img_size)
                                        for _ in range(p.mem_runs)) for which in ("timm", "ours")}
    rate = {k: [p.batch / t for t in v] for k, v in times.items()}
    r = record.results
    r.update({"max_abs_diff": diff, "timm_img_s_median": statistics.median(rate["timm"]),
              "ours_img_s_median": statistics.median(rate["ours"]),
              "ratio_median": statistics.median(o / t for o, t in zip(rate["ours"], rate["timm"])),
              "tensor_peak_mb": tensor_peak, "rss_rise_mb": mem, "rss_ratio": mem["ours"] / mem["timm"]})
    record.line(f"{p.model} batch {p.batch} at {p.img_size} px, {torch.get_num_threads()} threads, "
                f"{p.rounds} alternating rounds x {p.iters} iters")
    record.line(f"  throughput: timm {r['timm_img_s_median']:.2f} img/s, ours {r['ours_img_s_median']:.2f} img/s, "
                f"median ratio ours/timm {r['ratio_median']:.3f}")
    record.line(f"  peak tensor memory of a forward pass: timm {tensor_peak['timm']:.1f} MiB, "
                f"ours {tensor_peak['ours']:.1f} MiB")
    record.line(f"  peak resident-set rise in a steady-state forward pass: timm {mem['timm']:.1f} MiB, "
                f"ours {mem['ours']:.1f} MiB (ratio {r['rss_ratio']:.3f})")


SUITE = Suite("vit", "ViT inference against timm's: throughput, tensor and resident memory", run, (
    Param("model", "vit_small_patch16_224", "model name", quick="vit_tiny_patch16_224"),
    Param("batch", 8, "images a pass", quick=1),
    Param("img_size", 224, "pixels", quick=64),
    Param("rounds", 7, "timed alternating rounds", quick=1),
    Param("iters", 3, "passes a round", quick=1),
    Param("mem_runs", 3, "fresh processes for the resident-set figure", quick=1),
), requires=("timm",), doc=__doc__)
