"""``vision-attn benchmark MODEL...``: throughput, latency, peak memory and MFU, optionally side by side
with timm's model of the same name (parsing and printing only; see vision_attn.analysis.benchmark)."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from vision_attn.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

HEADERS = ["model", "batch", "img/s", "latency ms (median)", "p90 ms", "peak MiB", "GFLOPs/call", "MFU", "ratio"]


def parse_batches(text: str) -> list[int]:
    """``"1,8"`` -> [1, 8]; every entry a positive integer."""
    try:
        out = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        out = []
    if not out or any(b < 1 for b in out):
        raise ConfigError(f"--batch {text!r}: give positive batch sizes separated by commas, e.g. 1,8")
    return out


def rows_of(results: list) -> list[list[Any]]:
    """Table cells of benchmark results (see HEADERS)."""
    return [[r.model, r.batch, f"{r.throughput:.2f}", f"{r.latency_ms:.1f}", f"{r.latency_p90_ms:.1f}",
             f"{r.peak_memory_mb:.1f}", f"{r.flops_per_call / 1e9:.2f}", f"{100 * r.mfu:.1f}%",
             "" if r.ratio is None else f"{r.ratio:.3f}"] for r in results]


def _cmd_benchmark(args: argparse.Namespace, console: Console) -> int:
    import torch
    from rich.table import Table

    from vision_attn.analysis.benchmark import (benchmark_models, matmul_peak, on_fast_paths, share_weights, timm_optimizer,
                                                timm_twin, torch_optimizer)
    from vision_attn.analysis.flops import default_input_size
    from vision_attn.analysis.tables import to_markdown
    from vision_attn.analysis.targets import load_target
    from vision_attn.export.runtimes import RuntimeModel, check_precision, parse_runtimes
    from vision_attn.kernels import runnable_precision

    batches = parse_batches(args.batch)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is visible here; use --device cpu")
    if args.vs not in (None, "timm"):
        raise ConfigError(f"--vs {args.vs!r}: only timm is supported")
    runtimes = parse_runtimes(args.runtime)
    precision = runnable_precision(args.precision, device)
    if runtimes != ["torch"] and (args.train or device != "cpu"):
        raise ConfigError("--runtime onnxruntime/openvino times CPU inference: drop --train and --device cuda")
    for rt in runtimes:
        if rt != "torch":
            check_precision(rt, precision)
    log = (lambda line: console.print(line, style="dim", markup=False)) if args.verbose else None
    peak = matmul_peak(device, precision)
    results, shared = [], True
    for batch in batches:
        models, pairs, plans, optimizers = {}, {}, {}, {}
        img_size = args.img_size
        for name in args.models:
            target = load_target(name, scale=args.scale, device="cpu")
            img_size = img_size or target.img_size or default_input_size(target.model)[1:]  # the model's own
            if "torch" in runtimes:  # ours on the CPU fast paths, as training and torch-frozen run it
                models[target.name], plan = on_fast_paths(target.model, batch=batch, img_size=img_size, device=device,
                                                          precision=precision, train=args.train, compile=args.compile)
                if plan is not None:
                    plans[target.name] = plan
            for rt in runtimes:
                if rt != "torch":
                    hw = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
                    models[f"{target.name} [{rt}]"] = RuntimeModel(target.model, rt, hw, precision=precision,
                                                                   threads=torch.get_num_threads(), batch=batch)
                    if "torch" in runtimes:
                        pairs[f"{target.name} [{rt}]"] = target.name
            if args.vs == "timm":
                models[f"timm {name}"] = twin = timm_twin(name, args.img_size)
                optimizers[f"timm {name}"] = timm_optimizer(args.optimizer)
                shared = share_weights(target.model, twin) and shared
                pairs[target.name] = f"timm {name}"
        results += benchmark_models(models, batch=batch, img_size=img_size, device=device, precision=precision,
                                    compile=args.compile, channels_last=args.channels_last, train=args.train,
                                    optimizer=args.optimizer,
                                    optimizers={k: torch_optimizer(args.optimizer) for k in models} if args.same_optimizer
                                    else optimizers,
                                    rounds=args.rounds, iters=args.iters, warmup=args.warmup, peak_flops=peak,
                                    pairs=pairs, plans=plans, log=log)
    steps = ("torch's default step on both sides" if args.same_optimizer
             else "ours as our trainers build it, timm's by create_optimizer_v2" if args.vs == "timm" else "as our trainers build it")
    mode = f"training step ({args.optimizer}: {steps})" if args.train else "inference"
    title = (f"{mode}, {precision}{', compiled' if args.compile else ''}"
             f"{', channels-last' if args.channels_last else ''} on {device}, {results[0].img_size[0]}x"
             f"{results[0].img_size[1]}; MFU against a measured matmul peak of {peak / 1e9:.0f} GFLOP/s"
             f"{'; timm weights loaded into ours' if args.vs == 'timm' and shared else ''}")
    if args.json:
        print(json.dumps({"title": title, "matmul_peak_flops": peak, "results": [r.to_dict() for r in results]},
                         indent=2))
        return 0
    if args.markdown:
        print(title + "\n\n" + to_markdown(HEADERS, rows_of(results)), end="")
        return 0
    kinds = ", ".join(dict.fromkeys(r.memory_kind for r in results))
    table = Table(title=title, caption=f"{args.rounds} rounds x {args.iters} calls after {args.warmup} warm-up calls, "
                  "models alternating; ratio: median over rounds of the throughput over timm's (--vs) or over "
                  f"PyTorch's (--runtime); peak memory: {kinds}", caption_justify="left")
    for h in HEADERS:
        table.add_column(h, justify="left" if h == "model" else "right")
    for row in rows_of(results):
        table.add_row(*map(str, row))
    console.print(table)
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("benchmark", help="throughput, latency, peak memory and MFU of models (optionally vs timm)",
                       description="Throughput, latency (median and p90 after warm-up), peak memory and model FLOP "
                       "utilisation against a matmul peak measured on the same device at the start. Several models "
                       "(and with --vs timm their timm twins) run in one process, alternating every round.")
    p.add_argument("models", nargs="+", metavar="MODEL", help="registered model names (or detector YAMLs, runs)")
    p.add_argument("--batch", default="1", help="batch sizes, comma-separated (default 1), e.g. 1,8")
    p.add_argument("--img-size", type=int, default=None, help="square image size (default: the model's own)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="bf16 (fp32, with a warning, on a CPU without bfloat16 instructions): autocast for torch, bfloat16 weights for torch-frozen, the bf16 hint for "
                   "openvino (default fp32)")
    p.add_argument("--same-optimizer", action="store_true",
                   help="with --train: every model steps with torch's default OPTIMIZER (on the CPU a loop over the "
                   "parameters), comparing the models alone; default: each as its own trainer builds it (ours: the "
                   "fused step where it applies; timm's: timm.optim.create_optimizer_v2)")
    p.add_argument("--compile", action="store_true", help="run the models through torch.compile")
    p.add_argument("--channels-last", action="store_true", help="channels-last memory format")
    p.add_argument("--vs", default=None, metavar="timm", help="also run timm's model of the same name, alternating")
    p.add_argument("--runtime", default="torch", metavar="NAMES",
                   help="runtimes, comma-separated: torch (default), torch-frozen (the model readied once for "
                   "inference: weights cast, linear weights in oneDNN's layout), onnxruntime, openvino (pip install openvino), "
                   "onnxruntime-int8 (dynamic INT8), onnxruntime-qdq (static QDQ INT8), openvino-int8 (NNCF's static "
                   "INT8; pip install nncf), the static ones calibrated on random inputs (for speed); each an export "
                   "of the same model, timed alternating with the others (CPU inference; bf16: OpenVINO's bf16 hint)")
    p.add_argument("--train", action="store_true", help="time a training step (forward, backward, optimiser) instead")
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd", help="the training step's optimiser")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--scale", default=None, help="a detector YAML's scale letter")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    p.add_argument("--iters", type=int, default=5, help="calls per model and round (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up calls per model (default 2)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table instead")
    p.add_argument("-v", "--verbose", action="store_true", help="print each round's throughputs")
    p.set_defaults(func=_cmd_benchmark)
