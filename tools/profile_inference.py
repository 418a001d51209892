"""Where inference time goes, op by op: our PyTorch model against OpenVINO running its export.

    .venv/bin/python tools/profile_inference.py vit_small_patch16_224 --batch 8 --precision bf16
    .venv/bin/python tools/profile_inference.py swin_tiny_patch4_window7_224 --batch 1 --precision fp32 --json out.json

For one model, batch and precision, with the same random weights on both sides and the same threads:
- ours: ``torch.profiler`` over ``--iters`` calls (after warm-up), each op's self CPU time per call,
  of the eager model (bf16: autocast) or, with ``--frozen``, of the ``torch-frozen`` runtime's model
  (:func:`vision_attn.kernels.freeze`: weights in the precision, linear weights packed);
- OpenVINO: the model exported by ``export_openvino`` and compiled with the precision hint and
  ``PERF_COUNT``; its per-node times (``get_profiling_info``) summed by node type and the kernel it
  chose (``exec_type``, e.g. ``brgemm_avx512_bf16``), per call.
Both tables are grouped into the same concepts (matrix products, attention, normalisation,
activations, element-wise, layout and copies, other) so that a row says which part of the network is
slower on which side. Latency: the median wall time of one call, profiler off, alternating.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import vision_attn  # noqa: E402
from vision_attn.export.openvino import export_openvino, require_openvino  # noqa: E402
from vision_attn.export.signal_stack import kept_signal_stack  # noqa: E402
from vision_attn.kernels import freeze  # noqa: E402

# op or node-type name fragments -> concept (first match wins; lower case)
CONCEPTS = (
    ("attention", ("scaled_dot_product", "flash_attention", "mha", "sdpa", "softmax", "_efficient_attention")),
    ("matrix products", ("linear", "addmm", "matmul", "mm", "bmm", "fullyconnected", "convolution", "conv",
                         "gemm", "baddbmm", "mkldnn")),
    ("normalisation", ("layer_norm", "native_layer_norm", "mvn", "normalize", "batch_norm")),
    ("activations", ("gelu", "relu", "silu", "sigmoid", "tanh", "erf")),
    ("element-wise", ("add", "mul", "sub", "div", "eltwise", "multiply", "subtract", "roll", "where")),
    ("layout and copies", ("copy", "contiguous", "clone", "reshape", "view", "permute", "transpose", "cat",
                           "concat", "reorder", "gather", "slice", "stridedslice", "index", "split", "pad",
                           "to_copy", "_to", "expand", "unfold", "flatten", "select")),
)


def concept(name: str) -> str:
    low = name.lower()
    for group, keys in CONCEPTS:
        if any(k in low for k in keys):
            return group
    return "other"


def profile_torch(run, iters: int) -> dict[str, float]:
    """Self CPU milliseconds per call of each aten op of ``run()``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(iters):
            run()
    return {e.key: e.self_cpu_time_total / 1e3 / iters for e in prof.key_averages() if e.self_cpu_time_total > 0}


def profile_openvino(compiled, x: torch.Tensor, iters: int) -> dict[str, float]:
    """Milliseconds per call of each (node type, kernel) of the compiled model."""
    req = compiled.create_infer_request()
    arr = x.numpy()
    req.infer({0: arr})
    times: dict[str, float] = defaultdict(float)
    for _ in range(iters):
        req.infer({0: arr})
        for info in req.get_profiling_info():
            if info.status.name == "EXECUTED":
                times[f"{info.node_type} [{info.exec_type}]"] += info.real_time.total_seconds() * 1e3 / iters
    return dict(times)


def latencies(fns: dict[str, callable], rounds: int) -> dict[str, float]:
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            start = time.perf_counter()
            fn()
            out[k].append((time.perf_counter() - start) * 1e3)
    return {k: statistics.median(v) for k, v in out.items()}


def grouped(ops: dict[str, float]) -> dict[str, float]:
    g: dict[str, float] = defaultdict(float)
    for name, ms in ops.items():
        g[concept(name)] += ms
    return dict(g)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5, help="alternating latency rounds")
    ap.add_argument("--top", type=int, default=12, help="ops listed per side")
    ap.add_argument("--frozen", action="store_true", help="profile the torch-frozen runtime's model (default: eager)")
    ap.add_argument("--json", help="write the tables here too")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ov = require_openvino()
    torch.manual_seed(0)
    model = vision_attn.create_model(args.model, img_size=args.img_size).eval()
    x = torch.randn(args.batch, 3, args.img_size, args.img_size)
    bf16 = args.precision == "bf16"
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "model.xml"
        export_openvino(model, xml, (args.img_size, args.img_size), exporter="torchscript", dynamic_batch=True)
        core = ov.Core()
        with kept_signal_stack():
            compiled = core.compile_model(core.read_model(str(xml)), "CPU", {
                "INFERENCE_NUM_THREADS": args.threads, "INFERENCE_PRECISION_HINT": "bf16" if bf16 else "f32",
                "PERF_COUNT": True})
    arr = x.numpy()
    req = compiled.create_infer_request()

    dtype = torch.bfloat16 if bf16 else torch.float32
    net = freeze(copy.deepcopy(model), dtype) if args.frozen else model
    xin = x.to(dtype) if args.frozen else x

    def ours() -> None:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16 and not args.frozen):
            net(xin)

    for _ in range(2):  # warm-up: kernels chosen, weights packed
        ours()
        req.infer({0: arr})
    lat = latencies({"ours": ours, "openvino": lambda: req.infer({0: arr})}, args.rounds)
    mine = profile_torch(ours, args.iters)
    theirs = profile_openvino(compiled, x, args.iters)
    g_mine, g_theirs = grouped(mine), grouped(theirs)
    print(f"{args.model}, batch {args.batch}, {args.precision}, {args.threads} threads, "
          f"{'torch-frozen' if args.frozen else 'eager'}: median latency "
          f"ours {lat['ours']:.1f} ms, OpenVINO {lat['openvino']:.1f} ms ({lat['ours'] / lat['openvino']:.2f}x)")
    print("\n| concept | ours ms/call | OpenVINO ms/call |\n| --- | ---: | ---: |")
    for c in [c for c, _ in CONCEPTS] + ["other"]:
        print(f"| {c} | {g_mine.get(c, 0):.2f} | {g_theirs.get(c, 0):.2f} |")
    print(f"| total (profiled) | {sum(mine.values()):.2f} | {sum(theirs.values()):.2f} |")
    for side, ops in (("ours (aten op)", mine), ("OpenVINO (node type [kernel])", theirs)):
        print(f"\n| {side} | ms/call |\n| --- | ---: |")
        for name, ms in sorted(ops.items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"| {name} | {ms:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "batch": args.batch, "precision": args.precision,
                                               "frozen": args.frozen,
                                               "threads": args.threads, "latency_ms": lat, "ours": mine,
                                               "openvino": theirs}, indent=1))


if __name__ == "__main__":
    main()
