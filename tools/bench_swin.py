"""Benchmark: vision_attn's Swin against timm's, same weights, in one process, alternating.

    .venv/bin/python tools/bench_swin.py [--model swin_tiny_patch4_window7_224] [--rounds 7]
    .venv/bin/python tools/bench_swin.py --model swinv2_tiny_window8_256 --img-size 256 --train-batch 8 --threads 2

Two measurements, each ours against timm with the same weights:

- inference: ``--batch`` images (default 8) under ``torch.inference_mode``, ``--iters`` passes a round;
- training: one step on ``--train-batch`` images (default 16): forward, cross-entropy, backward and
  an SGD step, in training mode (stochastic depth 0.1 in both), ``--train-iters`` steps a round.

Throughput: the order of the two models alternates between rounds after a warm-up; the figure to
quote is the median over rounds of ours/timm. Memory: the peak of live tensor storage during one
pass / one step, tracked op by op (deterministic, see vision_attn/analysis/benchmark.py), and the peak of the
resident set above the built model over two passes / steps, in a fresh process per model (median
over ``--mem-runs`` processes).
Outputs are compared first: the benchmark is void if the two models disagree.
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
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import timm  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import vision_attn  # noqa: E402
from vision_attn.analysis.benchmark import alternate, median_ratio, rss_peak_mb, tensor_peak_mb  # noqa: E402


def build(which: str, name: str, weights: str) -> torch.nn.Module:
    """Build ``which`` ('ours' or 'timm') and load the weights in ``weights`` (timm's layout).
    timm's Swin keeps index and mask buffers that a meta-device build would leave empty: built on the CPU."""
    model = vision_attn.create_model(name) if which == "ours" else timm.create_model(name)
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    return model


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="swin_tiny_patch4_window7_224")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--train-batch", type=int, default=16)
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--train-rounds", type=int, default=5)
    ap.add_argument("--train-iters", type=int, default=1)
    ap.add_argument("--mem-runs", type=int, default=3)
    ap.add_argument("--skip", choices=["train", "infer"], help="leave one measurement out")
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's choice, one per core)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: CPU time of the calling thread (with --threads 1: robust to other processes)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--_memory", choices=["ours", "timm"], help=argparse.SUPPRESS)
    ap.add_argument("--_mode", choices=["infer", "train"], help=argparse.SUPPRESS)
    ap.add_argument("--_weights", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu" and torch.get_num_threads() != 1:
        ap.error("--clock cpu measures the calling thread only: use it with --threads 1")
    if args._memory:  # a fresh process: the resident-set rise of one pass or step
        steps = Steps(build(args._memory, args.model, args._weights), args.batch, args.train_batch, args.img_size)
        print(rss_peak_mb(steps.infer if args._mode == "infer" else steps.train))
        return

    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    torch.manual_seed(0)
    result: dict = {"model": args.model, "img_size": args.img_size, "threads": torch.get_num_threads(), "clock": args.clock,
                    "torch": torch.__version__, "timm": timm.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, "w.pth")
        src = timm.create_model(args.model)
        with torch.no_grad():  # non-trivial values everywhere (Swin V2 starts its post-norms at zero)
            for p in src.parameters():
                p.add_(torch.randn_like(p), alpha=0.02 if p.ndim > 1 else 0.1)
        torch.save(src.state_dict(), weights)
        models = {"timm": build("timm", args.model, weights), "ours": build("ours", args.model, weights)}
        steps = {k: Steps(m, args.batch, args.train_batch, args.img_size) for k, m in models.items()}
        diff = (steps["timm"].infer() - steps["ours"].infer()).abs().max().item()
        assert diff <= 1e-4, f"outputs differ by {diff}: the comparison is void"
        result["max_abs_diff"] = diff

        for mode, batch, rounds, iters in (("infer", args.batch, args.rounds, args.iters),
                                           ("train", args.train_batch, args.train_rounds, args.train_iters)):
            if args.skip == mode:
                continue
            fns = {k: getattr(s, mode) for k, s in steps.items()}
            for fn in fns.values():  # warm-up: kernel selection, allocator, caches
                fn()
            log(f"{mode}, batch {batch}:")
            rows = alternate(fns, rounds, iters, batch, log, time.thread_time if args.clock == "cpu" else time.perf_counter)
            peak = {k: tensor_peak_mb(fn) for k, fn in fns.items()}
            rss = {}
            for which in ("timm", "ours"):
                cmd = [sys.executable, __file__, "--model", args.model, "--batch", str(args.batch),
                       "--train-batch", str(args.train_batch), "--img-size", str(args.img_size),
                       *(["--threads", str(args.threads)] if args.threads else []),
                       "--_memory", which, "--_mode", mode, "--_weights", weights]
                rss[which] = statistics.median(
                    float(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()[-1])
                    for _ in range(args.mem_runs))
            result[mode] = {
                "batch": batch, "rounds": rounds, "iters": iters,
                "timm_img_s_median": statistics.median(r["timm"] for r in rows),
                "ours_img_s_median": statistics.median(r["ours"] for r in rows),
                "ratio_median": median_ratio(rows, "ours", "timm"),
                "ratios": [round(r["ours"] / r["timm"], 3) for r in rows],
                "tensor_peak_mb": peak, "rss_peak_mb": rss,
            }

    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.model} at {args.img_size} px, {result['threads']} threads, {args.clock} clock, max abs diff {diff:.1e}")
    for mode in ("infer", "train"):
        if mode not in result:
            continue
        r = result[mode]
        what = "inference" if mode == "infer" else "training step (fwd + bwd + SGD)"
        print(f"  {what}, batch {r['batch']}, {r['rounds']} alternating rounds x {r['iters']}:")
        print(f"    timm {r['timm_img_s_median']:.2f} img/s, ours {r['ours_img_s_median']:.2f} img/s, "
              f"median ratio ours/timm {r['ratio_median']:.3f} (rounds {r['ratios']})")
        print(f"    peak tensor memory: timm {r['tensor_peak_mb']['timm']:.1f} MiB, ours {r['tensor_peak_mb']['ours']:.1f} MiB")
        print(f"    peak resident set above the built model: timm {r['rss_peak_mb']['timm']:.1f} MiB, "
              f"ours {r['rss_peak_mb']['ours']:.1f} MiB")


if __name__ == "__main__":
    main()
