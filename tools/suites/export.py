"""onnxruntime against PyTorch CPU latency, and dynamic INT8 against FP32 (latency and accuracy).

For each model: PyTorch eager FP32, onnxruntime FP32 (dynamo exporter, opset 18), onnxruntime INT8
(onnxruntime.quantization.quantize_dynamic) and PyTorch INT8 (torch.ao quantize_dynamic), timed in one
process, alternating their order every round; medians of per-call latency. Then a classification run
(``--run``, by default runs/demo_digits from `make demo`) on the digits val set: top-1 of the four.

    python tools/bench.py export --models vit_small_patch16_224 swin_tiny_patch4_window7_224 \
        --batches 1 8 --rounds 5 --threads 2 --run runs/demo_digits
"""
from __future__ import annotations

import os
import tempfile

import torch

from tools.suites.harness import Param, Suite, alternate, median_ms, median_ratio


def variants(dep, folder: str, threads: int) -> dict:
    from vision_attn.export import export_onnx
    from vision_attn.export.quantize import onnx_predictor, quantize_onnx, quantize_torch

    fp32 = export_onnx(dep.model, os.path.join(folder, "m.onnx"), dep.input_size, dynamic_batch=True).path
    int8 = quantize_onnx(fp32, os.path.join(folder, "m.int8.onnx"))
    return {"torch fp32": dep.model, "ort fp32": onnx_predictor(fp32, threads),
            "ort int8": onnx_predictor(int8, threads), "torch int8": quantize_torch(dep.model)}


def run(p, record) -> None:
    from vision_attn.export import load_deployable
    from vision_attn.export.quantize import folder_accuracy

    torch.set_num_threads(p.threads)
    lines = []
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        for name in p.models:
            dep = load_deployable(model=name)
            fns = variants(dep, tmp, p.threads)
            for b in p.batches:
                x = torch.randn(b, 3, *dep.input_size)
                times = alternate({k: (lambda f=f: f(x)) for k, f in fns.items()}, p.rounds, warmup_calls=1)
                ms = median_ms(times)
                row = record.add("latency", {"model": name, "batch": b, **{f"{k} ms": v for k, v in ms.items()},
                                             "ort fp32 speed-up over torch fp32": median_ratio(times, "torch fp32", "ort fp32"),
                                             "ort int8 speed-up over ort fp32": median_ratio(times, "ort fp32", "ort int8")})
                lines.append([name, b, *(f"{ms[k]:.1f}" for k in ("torch fp32", "ort fp32", "ort int8", "torch int8")),
                              f"{row['ort fp32 speed-up over torch fp32']:.2f}x",
                              f"{row['ort int8 speed-up over ort fp32']:.2f}x"])
        record.table(["model", "batch", "PyTorch FP32 ms", "ORT FP32 ms", "ORT INT8 ms", "PyTorch INT8 ms",
                      "ORT FP32 vs PyTorch", "ORT INT8 vs ORT FP32"], lines)
        if p.run and os.path.exists(p.run):
            dep = load_deployable(checkpoint=p.run)
            fns = variants(dep, tmp, p.threads)
            record.line(f"{dep.label} on demo:digits val:")
            for k, f in fns.items():
                acc, n = folder_accuracy(f, "demo:digits", dep.transform, dep.classes)
                record.add("accuracy", {"variant": k, "top1": acc, "images": n})
                record.line(f"  {k}: top-1 {100 * acc:.2f}% ({n} images)")


SUITE = Suite("export", "onnxruntime FP32/INT8 against PyTorch FP32/INT8: latency, and a run's top-1", run, (
    Param("models", ["vit_small_patch16_224", "swin_tiny_patch4_window7_224"], "models",
          quick=["vit_tiny_patch16_224"]),
    Param("batches", [1, 8], "batch sizes", quick=[1]),
    Param("rounds", 5, "alternating rounds", quick=1),
    Param("threads", 2, "torch and onnxruntime threads", quick=1),
    Param("run", "runs/demo_digits", "a classification run for the accuracy figure (skipped where absent)", quick=""),
), requires=("onnxruntime", "onnx"), doc=__doc__)
