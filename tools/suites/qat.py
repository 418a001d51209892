"""FP32, post-training INT8 and quantization-aware INT8 of one classification run, in OpenVINO and
onnxruntime: top-1 on the data's val folder and latency, all measured in one process.

The QAT models are those `vision-attn export quantize --checkpoint RUN --qat -o FOLDER` wrote; the
post-training ones are made here as `eval --runtime openvino-int8|onnxruntime-qdq` makes them (NNCF's
static INT8 of the OpenVINO IR; onnxruntime's static QDQ), calibrated on 256 training images. Latency:
the six models alternating (rotated order every round), medians, one batch of random inputs.

    vision-attn export quantize --checkpoint runs/demo_digits --qat --data demo:digits -o runs/demo_digits_qat
    python tools/bench.py qat --run runs/demo_digits --qat runs/demo_digits_qat --data demo:digits
"""
from __future__ import annotations

import torch

from tools.suites.harness import Param, Suite, alternate, median_ms, median_ratio


def run(p, record) -> None:
    from vision_attn.data.calibration import folder_calibration
    from vision_attn.export import load_deployable
    from vision_attn.export.qat import QAT_FILES
    from vision_attn.export.quantize import folder_accuracy
    from vision_attn.export.runtimes import RuntimeModel

    import os

    if not (os.path.exists(p.run) and os.path.isdir(p.qat)):
        record.line(f"skipped: no run {p.run} or no QAT folder {p.qat} (see the suite's documentation)")
        return
    torch.set_num_threads(p.threads)
    dep = load_deployable(checkpoint=p.run)
    batches = folder_calibration(p.data, dep.transform, dep.classes, images=p.calibration_images)
    size, folder = dep.input_size, p.qat.rstrip("/")
    fns = {"OpenVINO FP32": RuntimeModel(dep.model, "openvino", size, threads=p.threads),
           "OpenVINO INT8 post-training": RuntimeModel(dep.model, "openvino-int8", size, threads=p.threads,
                                                       calibration=batches),
           "OpenVINO INT8 QAT": RuntimeModel(dep.model, "openvino-int8", size, threads=p.threads,
                                             int8_model=f"{folder}/{QAT_FILES['openvino']}"),
           "onnxruntime FP32": RuntimeModel(dep.model, "onnxruntime", size, threads=p.threads),
           "onnxruntime INT8 post-training": RuntimeModel(dep.model, "onnxruntime-qdq", size, threads=p.threads,
                                                          calibration=batches),
           "onnxruntime INT8 QAT": RuntimeModel(dep.model, "onnxruntime-qdq", size, threads=p.threads,
                                                int8_model=f"{folder}/{QAT_FILES['onnxruntime']}")}
    with torch.inference_mode():
        fp32, _ = folder_accuracy(dep.model, p.data, dep.transform, dep.classes)
        x = torch.randn(p.batch, 3, *size)
        times = alternate({k: (lambda f=f: f(x)) for k, f in fns.items()}, p.rounds, warmup_calls=2, rotate=True)
        ms = median_ms(times)
        rows = []
        for name, fn in fns.items():
            acc, n = folder_accuracy(fn, p.data, dep.transform, dep.classes)
            base = name.split()[0] + " FP32"
            speed = median_ratio(times, base, name) if name != base else 1.0
            record.add("rows", {"model": name, "top1": acc, "images": n, "ms": ms[name], "speed-up": speed})
            rows.append([name, f"{100 * acc:.2f}%", f"{100 * (acc - fp32):+.2f}", f"{ms[name] / p.batch:.3f}",
                         f"{speed:.2f}x"])
    record.line(f"{dep.label}: PyTorch FP32 top-1 {100 * fp32:.2f}% on {n} val images of {p.data}; batch {p.batch}, "
                f"{p.threads} threads")
    record.table(["runtime, precision", "top-1", "change (pts)", "ms per image", "speed-up over FP32 (same runtime)"],
                 rows)


SUITE = Suite("qat", "FP32 vs post-training INT8 vs QAT INT8 of a run in OpenVINO and onnxruntime: top-1 and "
              "latency in one process", run, (
                  Param("run", "runs/demo_digits", "the classification run", quick="runs/demo_digits"),
                  Param("qat", "runs/demo_digits_qat", "its `export quantize --qat` folder"),
                  Param("data", "demo:digits", "its data (the val folder is measured, train calibrates)"),
                  Param("calibration_images", 256, "post-training calibration images", quick=16),
                  Param("batch", 8, "latency batch", quick=2),
                  Param("rounds", 20, "alternating rounds", quick=1),
                  Param("threads", 2, "OpenVINO and onnxruntime threads", quick=1),
              ), requires=("onnxruntime", "openvino", "nncf"), doc=__doc__)
