"""Benchmark: what each CNN attention plug-in adds to torchvision's ResNet-50 at 224 px on the CPU.

    .venv/bin/python tools/bench_plugins.py [--blocks se cbam cbam_ultralytics eca coord] [--rounds 7] [--threads 1]

Each block goes on the residual branch of every bottleneck (16 blocks), inserted into a deep copy of
one plain ResNet-50, so all models share the backbone's weights. Parameters and MACs added come from
``vision_attn.analysis.count_flops`` (model with blocks minus plain model) and are checked against
the insertion report. Latency: for each batch size, every round times all models in a rotated order
(``--iters`` forward passes each, inference mode, after a warm-up); the figures are the median over
rounds of each model's latency and of its ratio to the plain model timed in the same round.
On a machine that other processes keep busy, ``--threads 1 --clock cpu`` measures the process's CPU
time, which their time slices do not inflate (shared caches and memory bandwidth still do).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

import torch  # noqa: E402
import torchvision  # noqa: E402

from vision_attn import insert_attention  # noqa: E402
from vision_attn.analysis import count_flops  # noqa: E402


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def latency_ms(model: torch.nn.Module, x: torch.Tensor, iters: int, clock: str = "wall") -> float:
    now = CLOCKS[clock]
    start = now()
    for _ in range(iters):
        model(x)
    return (now() - start) / iters * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", nargs="+", default=["se", "cbam", "cbam_ultralytics", "eca", "coord"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--clock", choices=list(CLOCKS), default="wall",
                    help="wall: elapsed time; cpu: this process's CPU time, which other processes on a busy "
                         "machine do not inflate (meaningful with --threads 1)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    plain = torchvision.models.resnet50().eval()
    base = count_flops(plain, args.img_size)
    models = {"resnet50": plain}
    added = {}
    for name in args.blocks:
        model = copy.deepcopy(plain)
        report = insert_attention(model, name, after="Bottleneck", position="residual", input_size=args.img_size)
        flops = count_flops(model.eval(), args.img_size)
        params, macs = flops.params - base.params, flops.macs - base.macs
        assert (params, macs) == (report.params, report.macs), f"{name}: count_flops and the report disagree"
        models[name] = model
        added[name] = {"block": report[0].block, "params": params, "macs": macs}

    timings: dict[int, dict[str, list[float]]] = {}
    with torch.inference_mode():
        for batch in args.batches:
            x = torch.randn(batch, 3, args.img_size, args.img_size)
            for m in models.values():
                latency_ms(m, x, 1)  # warm-up
            times: dict[str, list[float]] = {k: [] for k in models}
            names = list(models)
            for r in range(args.rounds):
                shift = r % len(names)
                for name in names[shift:] + names[:shift]:
                    times[name].append(latency_ms(models[name], x, args.iters, args.clock))
                print(f"batch {batch} round {r}: " + "  ".join(f"{k} {v[-1]:.1f}" for k, v in times.items()),
                      file=sys.stderr)
            timings[batch] = times

    rows = []
    for name in models:
        row = {"model": name, **added.get(name, {"block": "-", "params": 0, "macs": 0})}
        for batch, times in timings.items():
            row[f"ms_b{batch}"] = statistics.median(times[name])
            row[f"ratio_b{batch}"] = statistics.median(t / p for t, p in zip(times[name], times["resnet50"]))
        rows.append(row)
    result = {"img_size": args.img_size, "threads": torch.get_num_threads(), "torch": torch.__version__,
              "rounds": args.rounds, "iters": args.iters, "clock": args.clock, "base_params": base.params, "base_macs": base.macs,
              "rows": rows}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    head = "| insertion (every bottleneck, residual) | params added | MACs added |"
    rule = "| --- | ---: | ---: |"
    for batch in timings:
        head += f" {args.clock} ms, batch {batch} | vs plain |"
        rule += " ---: | ---: |"
    print(f"torchvision resnet50 at {args.img_size} px: {base.params:,} params, {base.macs / 1e9:.3f} GMACs; "
          f"{result['threads']} threads, median of {args.rounds} rotated rounds x {args.iters} passes")
    print(head)
    print(rule)
    for row in rows:
        label = "plain resnet50" if row["model"] == "resnet50" else f"`{row['model']}` ({row['block']})"
        line = f"| {label} | {row['params']:,} | {row['macs'] / 1e6:.2f} M |"
        for batch in timings:
            line += f" {row[f'ms_b{batch}']:.1f} | {row[f'ratio_b{batch}']:.3f} |"
        print(line)


if __name__ == "__main__":
    main()
