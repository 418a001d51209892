"""Where inference time goes, op by op: our PyTorch model against OpenVINO running its export.

    python tools/bench.py profile-inference --model vit_small_patch16_224 --batch 8 --precision bf16
    python tools/bench.py profile-inference --model swin_tiny_patch4_window7_224 --batch 1 --precision fp32 --json out.json

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

import copy
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

from tools.suites.harness import Param, Suite, alternate, median_ms

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


def grouped(ops: dict[str, float]) -> dict[str, float]:
    g: dict[str, float] = defaultdict(float)
    for name, ms in ops.items():
        g[concept(name)] += ms
    return dict(g)


def run(p, record) -> None:
    import vision_attn
    from vision_attn.export.openvino import export_openvino, require_openvino
    from vision_attn.export.signal_stack import kept_signal_stack
    from vision_attn.kernels import freeze

    torch.set_num_threads(p.threads)
    ov = require_openvino()
    torch.manual_seed(0)
    model = vision_attn.create_model(p.model, img_size=p.img_size).eval()
    x = torch.randn(p.batch, 3, p.img_size, p.img_size)
    bf16 = p.precision == "bf16"
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "model.xml"
        export_openvino(model, xml, (p.img_size, p.img_size), exporter="torchscript", dynamic_batch=True)
        core = ov.Core()
        with kept_signal_stack():
            compiled = core.compile_model(core.read_model(str(xml)), "CPU", {
                "INFERENCE_NUM_THREADS": p.threads, "INFERENCE_PRECISION_HINT": "bf16" if bf16 else "f32",
                "PERF_COUNT": True})
    arr = x.numpy()
    req = compiled.create_infer_request()

    dtype = torch.bfloat16 if bf16 else torch.float32
    net = freeze(copy.deepcopy(model), dtype) if p.frozen else model
    xin = x.to(dtype) if p.frozen else x

    def ours() -> None:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16 and not p.frozen):
            net(xin)

    # warm-up (kernels chosen, weights packed), then one call each a round
    lat = median_ms(alternate({"ours": ours, "openvino": lambda: req.infer({0: arr})}, p.rounds, warmup_calls=2))
    mine = profile_torch(ours, p.iters)
    theirs = profile_openvino(compiled, x, p.iters)
    g_mine, g_theirs = grouped(mine), grouped(theirs)
    record.results.update({"model": p.model, "batch": p.batch, "precision": p.precision, "frozen": p.frozen,
                           "threads": p.threads, "latency_ms": lat, "ours": mine, "openvino": theirs})
    record.line(f"{p.model}, batch {p.batch}, {p.precision}, {p.threads} threads, "
                f"{'torch-frozen' if p.frozen else 'eager'}: median latency "
                f"ours {lat['ours']:.1f} ms, OpenVINO {lat['openvino']:.1f} ms ({lat['ours'] / lat['openvino']:.2f}x)\n")
    rows = [[c, f"{g_mine.get(c, 0):.2f}", f"{g_theirs.get(c, 0):.2f}"] for c in [c for c, _ in CONCEPTS] + ["other"]]
    rows.append(["total (profiled)", f"{sum(mine.values()):.2f}", f"{sum(theirs.values()):.2f}"])
    record.table(["concept", "ours ms/call", "OpenVINO ms/call"], rows)
    for side, ops in (("ours (aten op)", mine), ("OpenVINO (node type [kernel])", theirs)):
        record.table([side, "ms/call"], [[name, f"{ms:.2f}"]
                                         for name, ms in sorted(ops.items(), key=lambda kv: -kv[1])[:p.top]])


SUITE = Suite("profile-inference", "op by op: our PyTorch inference against OpenVINO running its export", run, (
    Param("model", "vit_small_patch16_224", "model name", quick="vit_tiny_patch16_224"),
    Param("batch", 1, "images a call"),
    Param("img_size", 224, "pixels", quick=32),
    Param("precision", "fp32", "precision", choices=["fp32", "bf16"]),
    Param("threads", 2, "torch and OpenVINO threads", quick=1),
    Param("iters", 5, "profiled calls", quick=1),
    Param("rounds", 5, "alternating latency rounds", quick=1),
    Param("top", 12, "ops listed per side"),
    Param("frozen", False, "profile the torch-frozen runtime's model (default: eager)"),
), requires=("openvino",), doc=__doc__)
