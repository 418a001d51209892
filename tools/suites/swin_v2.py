"""vision_attn's Swin V2 against timm's, same weights, in one process, alternating.

    python tools/bench.py swin-v2 --rounds 5 --train-rounds 3

A lighter sibling of the ``swin`` suite (no resident-set processes) for a busy machine: 2 threads,
batch 8 for inference (``torch.inference_mode``) and for a training step (forward, cross-entropy,
backward, SGD; training mode, stochastic depth 0.1 in both). Each round runs the two models one after
the other, in alternating order; the figure to quote is the median over rounds of the per-round ratio
ours/timm. Peak tensor memory: live tensor storage during one pass / step, tracked op by op
(vision_attn.analysis.benchmark.tensor_peak_mb). Outputs are compared first.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tools.suites.harness import Param, Suite, alternate, log, median, median_ratio


def run(p, record) -> None:
    import timm

    import vision_attn
    from vision_attn.analysis.benchmark import tensor_peak_mb

    torch.set_num_threads(p.threads)
    torch.manual_seed(0)
    peer = timm.create_model(p.model)
    with torch.no_grad():  # non-trivial values everywhere (Swin V2 starts its post-norms at zero)
        for q in peer.parameters():
            q.add_(torch.randn_like(q), alpha=0.02 if q.ndim > 1 else 0.1)
    ours = vision_attn.create_model(p.model)
    ours.load_state_dict(peer.state_dict())
    models = {"timm": peer, "ours": ours}
    size = ours.patch_embed.img_size
    x = torch.randn(p.batch, 3, *size)
    y = torch.randint(0, 1000, (p.batch,))
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-4) for k, m in models.items()}

    def infer(k):
        models[k].eval()
        with torch.inference_mode():
            return models[k](x)

    def train(k):
        models[k].train()
        F.cross_entropy(models[k](x), y).backward()
        opts[k].step()
        opts[k].zero_grad(set_to_none=True)

    result = record.results
    result.update({"model": p.model, "img_size": list(size), "batch": p.batch, "threads": p.threads,
                   "max_abs_diff": (infer("timm") - infer("ours")).abs().max().item()})
    assert result["max_abs_diff"] <= 1e-4, "the two models disagree: the comparison is void"
    lines = []
    for mode, fn, rounds in (("infer", infer, p.rounds), ("train", train, p.train_rounds)):
        times = alternate({k: (lambda k=k: fn(k)) for k in models}, rounds, warmup_calls=1, log=log)
        peak = {k: tensor_peak_mb(lambda k=k: fn(k)) for k in models}
        result[mode] = {"ratio_median": median_ratio(times, "timm", "ours"),
                        "ratios": [round(t / o, 3) for t, o in zip(times["timm"], times["ours"])],
                        "img_s_median": {k: p.batch / median(v) for k, v in times.items()},
                        "tensor_peak_mb": peak}
        r = result[mode]
        lines.append([mode, f"{r['img_s_median']['timm']:.2f}", f"{r['img_s_median']['ours']:.2f}",
                      f"{r['ratio_median']:.3f}", f"{peak['timm']:.1f}", f"{peak['ours']:.1f}"])
    record.table(["pass", "timm img/s", "ours img/s", "ours/timm (median of rounds)", "timm peak MiB",
                  "ours peak MiB"], lines,
                 f"{p.model}, batch {p.batch}, {p.threads} threads, max abs diff {result['max_abs_diff']:.1e}")


SUITE = Suite("swin-v2", "Swin V2 inference and training step against timm's (light: no fresh processes)", run, (
    Param("model", "swinv2_tiny_window8_256", "model name"),
    Param("batch", 8, "images a pass or step", quick=1),
    Param("threads", 2, "torch threads", quick=1),
    Param("rounds", 5, "inference rounds", quick=1),
    Param("train_rounds", 3, "training rounds", quick=1),
), requires=("timm",), doc=__doc__)
