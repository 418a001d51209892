"""onnxruntime vs PyTorch CPU latency, and dynamic INT8 vs FP32 (latency and accuracy).

For each model: PyTorch eager FP32, onnxruntime FP32 (dynamo exporter, opset 18), onnxruntime INT8
(onnxruntime.quantization.quantize_dynamic) and PyTorch INT8 (torch.ao quantize_dynamic), timed in one
process, alternating their order every round; medians of per-call latency. Then the demo classifier
(runs/demo_digits, `make demo`) on the digits val set: top-1 of the four.

    .venv/bin/python tools/bench_export.py --models vit_small_patch16_224 swin_tiny_patch4_window7_224 \
        --batches 1 8 --rounds 5 --threads 2 --run runs/demo_digits
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

from vision_attn.analysis.benchmark import alternate, median_ratio  # noqa: E402
from vision_attn.export import export_onnx, load_deployable  # noqa: E402
from vision_attn.export.quantize import folder_accuracy, onnx_predictor, quantize_onnx, quantize_torch  # noqa: E402


def variants(dep, folder: str, threads: int) -> dict:
    fp32 = export_onnx(dep.model, os.path.join(folder, "m.onnx"), dep.input_size, dynamic_batch=True).path
    int8 = quantize_onnx(fp32, os.path.join(folder, "m.int8.onnx"))
    return {"torch fp32": dep.model, "ort fp32": onnx_predictor(fp32, threads),
            "ort int8": onnx_predictor(int8, threads), "torch int8": quantize_torch(dep.model)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["vit_small_patch16_224", "swin_tiny_patch4_window7_224"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--run", default="runs/demo_digits", help="a classification run for the accuracy figure")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {os.cpu_count()} CPUs")
    print("| model | batch | PyTorch FP32 ms | ORT FP32 ms | ORT INT8 ms | PyTorch INT8 ms | ORT FP32 vs PyTorch | "
          "ORT INT8 vs ORT FP32 |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        for name in args.models:
            dep = load_deployable(model=name)
            fns = variants(dep, tmp, args.threads)
            for b in args.batches:
                x = torch.randn(b, 3, *dep.input_size)
                steps = {k: (lambda f=f: f(x)) for k, f in fns.items()}
                for s in steps.values():
                    s()
                rows = alternate(steps, rounds=args.rounds, iters=1, items=b)
                ms = {k: 1e3 * b / statistics.median(r[k] for r in rows) for k in steps}
                print(f"| {name} | {b} | {ms['torch fp32']:.1f} | {ms['ort fp32']:.1f} | {ms['ort int8']:.1f} | "
                      f"{ms['torch int8']:.1f} | {median_ratio(rows, 'ort fp32', 'torch fp32'):.2f}x | "
                      f"{median_ratio(rows, 'ort int8', 'ort fp32'):.2f}x |", flush=True)
        if args.run and os.path.exists(args.run):
            dep = load_deployable(checkpoint=args.run)
            fns = variants(dep, tmp, args.threads)
            print(f"\n{dep.label} on demo:digits val:")
            for k, f in fns.items():
                acc, n = folder_accuracy(f, "demo:digits", dep.transform, dep.classes)
                print(f"  {k}: top-1 {100 * acc:.2f}% ({n} images)", flush=True)


if __name__ == "__main__":
    main()
