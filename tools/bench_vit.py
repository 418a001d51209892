"""Benchmark: vision_attn's ViT against timm's, same weights, in one process, alternating.

    .venv/bin/python tools/bench_vit.py [--model vit_small_patch16_224] [--batch 8] [--rounds 7]

Throughput: each round times timm then ours (order alternates between rounds) over ``--iters``
forward passes after a warm-up; the figure to quote is the median over rounds of ours/timm.
Memory, two ways: (1) the peak of live tensor storage during one forward pass, tracked op by op
(deterministic; it sees the tensors the two implementations create, not allocator or code pages);
(2) the resident set: each model runs in a fresh subprocess (built on the meta device, weights
assigned from the same file); after a warm-up pass of the same shape, a thread samples the resident
set during one pass, and the figure is its peak rise, median over ``--mem-runs`` processes.
Outputs are compared too: the benchmark is void if the two models disagree.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

import timm  # noqa: E402
import torch  # noqa: E402

import vision_attn  # noqa: E402
from vision_attn.analysis.benchmark import rss_rise_mb, tensor_peak_mb  # noqa: E402


def build(which: str, name: str, weights: str | None) -> torch.nn.Module:
    """Build ``which`` ('ours' or 'timm') on the meta device and assign weights from ``weights``."""
    with torch.device("meta"):
        model = vision_attn.create_model(name) if which == "ours" else timm.create_model(name)
    if weights is None:
        return model.to_empty(device="cpu").eval()
    state = torch.load(weights, map_location="cpu", weights_only=True)
    model.load_state_dict(state, assign=True)
    return model.eval()


def measure_memory(which: str, name: str, weights: str, batch: int, img: int) -> float:
    """Steady-state rise of the resident set during one forward pass (see vision_attn.analysis.benchmark.rss_rise_mb)."""
    model = build(which, name, weights)
    x = torch.randn(batch, 3, img, img)
    with torch.inference_mode():
        return rss_rise_mb(lambda: model(x))


def throughput(model: torch.nn.Module, x: torch.Tensor, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        model(x)
    return iters * x.shape[0] / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="vit_small_patch16_224")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--mem-runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--_memory", choices=["ours", "timm"], help=argparse.SUPPRESS)
    ap.add_argument("--_weights", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args._memory:
        print(measure_memory(args._memory, args.model, args._weights, args.batch, args.img_size))
        return

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, "w.pth")
        torch.save(timm.create_model(args.model).state_dict(), weights)
        theirs, ours = build("timm", args.model, weights), build("ours", args.model, weights)
        x = torch.randn(args.batch, 3, args.img_size, args.img_size)
        with torch.inference_mode():
            diff = (theirs(x) - ours(x)).abs().max().item()
            assert diff <= 1e-4, f"outputs differ by {diff}: the comparison is void"
            for m in (theirs, ours):  # warm-up: first calls pay for kernel selection and allocation
                throughput(m, x, 2)
            rows = []
            for r in range(args.rounds):
                order = [("timm", theirs), ("ours", ours)] if r % 2 == 0 else [("ours", ours), ("timm", theirs)]
                t = {k: throughput(m, x, args.iters) for k, m in order}
                rows.append(t)
                print(f"round {r}: timm {t['timm']:.2f} img/s  ours {t['ours']:.2f} img/s  ratio {t['ours'] / t['timm']:.3f}",
                      file=sys.stderr)
        with torch.inference_mode():
            tensor_peak = {k: tensor_peak_mb(lambda m=m: m(x)) for k, m in (("timm", theirs), ("ours", ours))}
        mem = {}
        for which in ("timm", "ours"):
            cmd = [sys.executable, __file__, "--model", args.model, "--batch", str(args.batch),
                   "--img-size", str(args.img_size), "--_memory", which, "--_weights", weights]
            mem[which] = statistics.median(
                float(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()[-1])
                for _ in range(args.mem_runs))

    result = {
        "model": args.model, "batch": args.batch, "img_size": args.img_size, "threads": torch.get_num_threads(),
        "torch": torch.__version__, "timm": timm.__version__, "max_abs_diff": diff,
        "timm_img_s_median": statistics.median(r["timm"] for r in rows),
        "ours_img_s_median": statistics.median(r["ours"] for r in rows),
        "ratio_median": statistics.median(r["ours"] / r["timm"] for r in rows),
        "tensor_peak_mb": tensor_peak, "rss_rise_mb": mem, "rss_ratio": mem["ours"] / mem["timm"],
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.model} batch {args.batch} at {args.img_size} px, {result['threads']} threads, "
              f"{args.rounds} alternating rounds x {args.iters} iters")
        print(f"  throughput: timm {result['timm_img_s_median']:.2f} img/s, ours {result['ours_img_s_median']:.2f} img/s, "
              f"median ratio ours/timm {result['ratio_median']:.3f}")
        print(f"  peak tensor memory of a forward pass: timm {tensor_peak['timm']:.1f} MiB, ours {tensor_peak['ours']:.1f} MiB")
        print(f"  peak resident-set rise in a steady-state forward pass: timm {mem['timm']:.1f} MiB, ours {mem['ours']:.1f} MiB "
              f"(ratio {result['rss_ratio']:.3f})")


if __name__ == "__main__":
    main()
