"""What each CNN attention plug-in adds to torchvision's ResNet-50 at 224 px on the CPU.

    python tools/bench.py plugins --rounds 7 --iters 3 --threads 1 --clock cpu

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

import copy

import torch

from tools.suites.harness import CLOCKS, Param, Suite, alternate, log, median, median_ratio


def run(p, record) -> None:
    import torchvision

    from vision_attn import insert_attention
    from vision_attn.analysis import count_flops

    if p.threads:
        torch.set_num_threads(p.threads)
    torch.manual_seed(0)
    plain = torchvision.models.resnet50().eval()
    base = count_flops(plain, p.img_size)
    models = {"resnet50": plain}
    added = {}
    for name in p.blocks:
        model = copy.deepcopy(plain)
        report = insert_attention(model, name, after="Bottleneck", position="residual", input_size=p.img_size)
        flops = count_flops(model.eval(), p.img_size)
        params, macs = flops.params - base.params, flops.macs - base.macs
        assert (params, macs) == (report.params, report.macs), f"{name}: count_flops and the report disagree"
        models[name] = model
        added[name] = {"block": report[0].block, "params": params, "macs": macs}

    timings = {}
    with torch.inference_mode():
        for batch in p.batches:
            x = torch.randn(batch, 3, p.img_size, p.img_size)
            timings[batch] = alternate({k: (lambda m=m: m(x)) for k, m in models.items()}, p.rounds, iters=p.iters,
                                       clock=CLOCKS["cpu" if p.clock == "cpu" else "wall"], warmup_calls=1,
                                       rotate=True, log=lambda s, b=batch: log(f"batch {b} {s}"))
    rows = []
    for name in models:
        row = {"model": name, **added.get(name, {"block": "-", "params": 0, "macs": 0})}
        for batch, times in timings.items():
            row[f"ms_b{batch}"] = 1e3 * median(times[name])
            row[f"ratio_b{batch}"] = median_ratio(times, name, "resnet50")
        rows.append(record.add("rows", row))
    record.results.update({"img_size": p.img_size, "threads": torch.get_num_threads(), "base_params": base.params,
                           "base_macs": base.macs})
    head = ["insertion (every bottleneck, residual)", "params added", "MACs added"]
    for batch in timings:
        head += [f"{p.clock} ms, batch {batch}", "vs plain"]
    lines = []
    for row in rows:
        label = "plain resnet50" if row["model"] == "resnet50" else f"`{row['model']}` ({row['block']})"
        line = [label, f"{row['params']:,}", f"{row['macs'] / 1e6:.2f} M"]
        for batch in timings:
            line += [f"{row[f'ms_b{batch}']:.1f}", f"{row[f'ratio_b{batch}']:.3f}"]
        lines.append(line)
    record.table(head, lines, f"torchvision resnet50 at {p.img_size} px: {base.params:,} params, "
                 f"{base.macs / 1e9:.3f} GMACs; {torch.get_num_threads()} threads, median of {p.rounds} rotated rounds "
                 f"x {p.iters} passes")


SUITE = Suite("plugins", "what SE, CBAM, ECA and coordinate attention add to ResNet-50: params, MACs, latency", run, (
    Param("blocks", ["se", "cbam", "cbam_ultralytics", "eca", "coord"], "blocks", quick=["se"]),
    Param("batches", [1, 8], "batch sizes", quick=[1]),
    Param("img_size", 224, "pixels", quick=64),
    Param("rounds", 7, "rotated rounds", quick=1),
    Param("iters", 3, "forward passes a round", quick=1),
    Param("threads", 0, "torch threads (0: torch's choice)"),
    Param("clock", "wall", "wall: elapsed time; cpu: this process's CPU time (meaningful with --threads 1)",
          choices=["wall", "cpu"]),
), doc=__doc__)
