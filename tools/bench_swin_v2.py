"""Benchmark: vision_attn's Swin V2 against timm's, same weights, in one process, alternating.

    .venv/bin/python tools/bench_swin_v2.py [--model swinv2_tiny_window8_256] [--rounds 5] [--train-rounds 3]

A lighter sibling of tools/bench_swin.py (no resident-set subprocesses) for a busy machine: 2
threads, batch 8 for inference (``torch.inference_mode``) and for a training step (forward,
cross-entropy, backward, SGD; training mode, stochastic depth 0.1 in both). Each round runs the two
models one after the other, in alternating order; the figure to quote is the median over rounds of
the per-round ratio ours/timm. Peak tensor memory: live tensor storage during one pass / step,
tracked op by op (vision_attn.analysis.benchmark.tensor_peak_mb). Outputs are compared first.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import timm  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import vision_attn  # noqa: E402
from vision_attn.analysis.benchmark import tensor_peak_mb  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="swinv2_tiny_window8_256")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--train-rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    peer = timm.create_model(args.model)
    with torch.no_grad():  # non-trivial values everywhere (Swin V2 starts its post-norms at zero)
        for p in peer.parameters():
            p.add_(torch.randn_like(p), alpha=0.02 if p.ndim > 1 else 0.1)
    ours = vision_attn.create_model(args.model)
    ours.load_state_dict(peer.state_dict())
    models = {"timm": peer, "ours": ours}
    size = ours.patch_embed.img_size
    x = torch.randn(args.batch, 3, *size)
    y = torch.randint(0, 1000, (args.batch,))
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

    result = {"model": args.model, "img_size": list(size), "batch": args.batch, "threads": args.threads,
              "max_abs_diff": (infer("timm") - infer("ours")).abs().max().item()}
    assert result["max_abs_diff"] <= 1e-4, "the two models disagree: the comparison is void"
    for mode, fn, rounds in (("infer", infer, args.rounds), ("train", train, args.train_rounds)):
        for k in models:  # warm-up
            fn(k)
        ratios, secs = [], {"timm": [], "ours": []}
        for r in range(rounds):
            order = ["timm", "ours"] if r % 2 == 0 else ["ours", "timm"]
            t = {}
            for k in order:
                start = time.perf_counter()
                fn(k)
                t[k] = time.perf_counter() - start
                secs[k].append(t[k])
            ratios.append(t["timm"] / t["ours"])
            print(f"{mode} round {r}: timm {t['timm']:.2f} s, ours {t['ours']:.2f} s, ours/timm {ratios[-1]:.3f}",
                  file=sys.stderr, flush=True)
        peak = {k: tensor_peak_mb(lambda k=k: fn(k)) for k in models}
        result[mode] = {"ratio_median": statistics.median(ratios), "ratios": [round(r, 3) for r in ratios],
                        "img_s_median": {k: args.batch / statistics.median(v) for k, v in secs.items()},
                        "tensor_peak_mb": peak}
        print(json.dumps(result[mode]), file=sys.stderr, flush=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
