"""One accuracy-and-speed table of a trained run (classifier, detector or segmenter), every precision and
option in every runtime that runs it, all measured in one process:

- fp32 in PyTorch eager (``torch``), ``torch-frozen``, onnxruntime and OpenVINO; bf16 in the runtimes
  that run it (PyTorch's autocast, ``torch-frozen``'s bf16 weights, OpenVINO's bf16 hint; onnxruntime's
  CPU provider has none), left out with the one-line fp32 notice on a CPU without bf16 instructions;
- post-training INT8: onnxruntime's static QDQ and NNCF's INT8 of the OpenVINO IR, calibrated as
  ``vision-attn eval --runtime onnxruntime-qdq|openvino-int8`` calibrates (the task's training images);
- quantization-aware INT8 (``--qat FOLDER``, written by ``vision-attn export quantize --qat``): its QDQ
  model in onnxruntime and its IR in OpenVINO, run as they are;
- for a ViT (a network with ``set_token_merging``), token merging at ``--merge`` rates in PyTorch eager
  and ``torch-frozen``.

Accuracy is the task's own evaluation (``Task.evaluate``: top-1, box mAP@.5:.95, mask mAP@.5:.95) with
each variant as its runtime, the path ``vision-attn eval TASK --runtime R`` takes. Latency: every
variant's network on one batch of random inputs of the run's size, alternating (the order rotated every
round), medians; speed-ups are medians of each round's ratios, over PyTorch fp32 and over the same
runtime in fp32.

    vision-attn export quantize --checkpoint runs/demo_det --qat --data demo:digit-boxes -o runs/demo_det_qat
    python tools/bench.py deploy_table --run runs/demo_det --data demo:digit-boxes --qat runs/demo_det_qat
    python tools/bench.py deploy_table --run runs/demo_digits --data demo:digits --qat runs/demo_digits_qat --merge 2 4
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from tools.suites.harness import CLOCKS, Param, Suite, alternate, log, median_ms, median_ratio

# the task's evaluation report keys shown, by what an export of the run returns (Task.export_kind): the
# first is the accuracy compared across rows
METRICS: dict[str, tuple[tuple[str, str], ...]] = {
    "classifier": (("top1", "top-1"),),
    "detector": (("map", "mAP@.5:.95"), ("map50", "mAP@.5")),
    "segmenter": (("mask_map", "mask mAP@.5:.95"), ("map", "box mAP@.5:.95")),
}
FLOAT_RUNTIMES = ("torch", "torch-frozen", "onnxruntime", "openvino")
INT8_RUNTIMES = ("onnxruntime-qdq", "openvino-int8")
BASE = {"onnxruntime-qdq": "onnxruntime", "openvino-int8": "openvino"}


@dataclass(frozen=True)
class Variant:
    """One row: ``runtime`` (an ``eval --runtime`` name), ``precision`` (``fp32``, ``bf16``, ``int8``),
    ``qat`` (the QAT folder's INT8 model instead of post-training INT8), ``merge`` (ToMe's r, 0: off)."""

    runtime: str
    precision: str = "fp32"
    qat: bool = False
    merge: int = 0

    @property
    def name(self) -> str:
        option = {"int8": " QAT" if self.qat else " post-training"}.get(self.precision, "")
        return f"{self.runtime} {self.precision}{option}" + (f" ToMe r={self.merge}" if self.merge else "")

    @property
    def base(self) -> "Variant":
        """The same runtime in fp32 without options (its speed-up's reference)."""
        return Variant(BASE.get(self.runtime, self.runtime))


def runs_bf16(runtime: str) -> bool:
    """Whether ``runtime`` runs bf16 at all (onnxruntime's CPU provider does not)."""
    from vision_attn.errors import ConfigError
    from vision_attn.export.runtimes import check_precision

    if runtime == "torch":
        return True
    try:
        check_precision(runtime, "bf16")
    except ConfigError:
        return False
    return True


def variants(*, bf16: bool, qat: bool, merges: Sequence[int]) -> list[Variant]:
    """The rows of one run's table: fp32 everywhere, bf16 where the CPU and the runtime run it
    (``bf16``), post-training INT8, QAT INT8 (``qat``: a QAT folder was given), and token merging at
    ``merges`` (empty: the network has none) in the PyTorch runtimes."""
    rows = [Variant(rt) for rt in FLOAT_RUNTIMES]
    if bf16:
        rows += [Variant(rt, "bf16") for rt in FLOAT_RUNTIMES if runs_bf16(rt)]
    rows += [Variant(rt, "int8") for rt in INT8_RUNTIMES]
    if qat:
        rows += [Variant(rt, "int8", qat=True) for rt in INT8_RUNTIMES]
    rows += [Variant(rt, merge=r) for r in merges for rt in ("torch", "torch-frozen")]
    return rows


def table(kind: str, rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of the table: each row's metrics (``METRICS[kind]``, in percent), the change of
    the first from the first row's in points, milliseconds per image, and the two speed-ups."""
    metrics = METRICS[kind]
    first = rows[0][metrics[0][0]] if rows else 0.0
    headers = ["runtime, precision", *(label for _, label in metrics), "change (pts)", "ms per image",
               "speed-up over torch fp32", "over the runtime's fp32"]
    cells = []
    for r in rows:
        cells.append([r["variant"], *(f"{100 * r[key]:.2f}" for key, _ in metrics),
                      f"{100 * (r[metrics[0][0]] - first):+.2f}", f"{r['ms_per_image']:.3f}",
                      *(f"{r[k]:.2f}x" if r[k] == r[k] else "n/a" for k in ("speedup", "speedup_runtime"))])
    return headers, cells


def _autocast(model: Any) -> Callable[[Any], Any]:
    """``model`` under bf16 autocast (as ``vision-attn benchmark --precision bf16`` runs PyTorch), its
    floating outputs returned in float32 (the tasks' post-processing takes them)."""
    import torch
    from torch.utils._pytree import tree_map

    def run(x):
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        return tree_map(lambda t: t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t, out)
    return run


def _builder(v: Variant, qat_folder: str, built: dict[str, Any]) -> Callable[..., Any]:
    """The ``eval`` runtime factory of ``v`` (``vision_attn.tasks.runs.Runtime``); what it builds is kept in
    ``built[v.name]`` for the timing."""
    from types import SimpleNamespace

    from vision_attn.commands._runtime import runtime_of
    from vision_attn.export.qat import QAT_FILES
    from tools.suites.token_merging import merged_runtime

    int8 = f"{qat_folder}/{QAT_FILES[BASE[v.runtime]]}" if v.qat else None
    factory = runtime_of(SimpleNamespace(runtime=v.runtime, int8_model=int8), precision=v.precision
                         if v.precision != "int8" else "fp32")

    def build(model, hw, calibration):
        if v.merge:
            model = merged_runtime(v.merge)(model, hw, None)
        if factory is not None:
            net = factory(model, hw, calibration)
        else:
            net = _autocast(model) if v.precision == "bf16" else model
        built[v.name] = (net, hw)
        return net
    return build


def _bf16(record) -> bool:
    """Whether bf16 runs here; where it does not, the one-line notice of ``runnable_precision`` is printed."""
    from vision_attn.kernels import runnable_precision

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        native = runnable_precision("bf16") == "bf16"
    for w in caught:
        record.line(f"note: {w.message}")
    return native


def _training_data(run_path: str) -> str:
    from vision_attn.export.qat import _data_key
    from vision_attn.io.state_dict import read_checkpoint, run_checkpoint_path
    from vision_attn.tasks import get_task, load_run

    ckpt = read_checkpoint(run_checkpoint_path(run_path))
    key = _data_key(get_task(load_run(run_path, weights=False).task))
    return str((ckpt.get("datamodule_hyper_parameters") or {}).get(key) or "")


def run(p, record) -> None:
    import torch

    from vision_attn.tasks import get_task, load_run
    from vision_attn.tasks.task import Options

    if not os.path.exists(p.run) or (p.qat and not os.path.isdir(p.qat)):
        record.line(f"skipped: no run {p.run}{f' or no QAT folder {p.qat}' if p.qat else ''} (see the suite's "
                    "documentation)")
        return
    torch.set_num_threads(p.threads)
    run_ = load_run(p.run, weights=False)
    task = get_task(run_.task)
    data = p.data or _training_data(p.run)
    merges = list(p.merge) if hasattr(run_.model, "set_token_merging") else []
    rows = variants(bf16=_bf16(record), qat=bool(p.qat), merges=merges)
    only = [name for name in p.only if name]
    if only:
        rows = [v for v in rows if v.name in only or v == Variant("torch")]
    built: dict[str, Any] = {}
    results: dict[str, dict[str, Any]] = {}
    options = Options(batch_size=p.eval_batch)
    for v in rows:
        log(f"evaluating {v.name} on {data}")
        report = task.evaluate(p.run, data, options, _builder(v, p.qat.rstrip("/"), built))
        results[v.name] = {k: report[k] for k, _ in METRICS[task.export_kind]}
        results[v.name]["images"] = report.get("images")
    hw = next(iter(built.values()))[1]
    x = torch.randn(p.batch, 3, *hw, generator=torch.Generator().manual_seed(0)).contiguous(
        memory_format=torch.channels_last)
    with torch.inference_mode():
        times = alternate({k: (lambda f=f: f(x)) for k, (f, _) in built.items()}, p.rounds, warmup_calls=2,
                          rotate=True, clock=CLOCKS[p.clock])
    ms = median_ms(times)
    out = []
    for v in rows:
        row = {"variant": v.name, "runtime": v.runtime, "precision": v.precision, "qat": v.qat, "merge": v.merge,
               **results[v.name], "ms_per_image": ms[v.name] / p.batch,
               "speedup": median_ratio(times, "torch fp32", v.name),
               "speedup_runtime": median_ratio(times, v.base.name, v.name) if v.base.name in times else float("nan")}
        out.append(record.add("rows", row))
    record.line(f"{run_.label} ({task.name}) on {data}: {out[0]['images']} val images; latency at batch {p.batch}, "
                f"{hw[0]}x{hw[1]}, {p.threads} threads, {p.rounds} rounds alternating, {p.clock} time")
    record.table(*table(task.export_kind, out))


SUITE = Suite("deploy_table", "accuracy and latency of a run in every runtime and precision (fp32, bf16, "
              "post-training and QAT INT8, token merging), in one process", run, (
                  Param("run", "runs/demo_digits", "the trained run (classifier, detector or segmenter)"),
                  Param("data", "", "its data, whose val split is measured (default: the run's own)"),
                  Param("qat", "", "its `export quantize --qat` folder (empty: no QAT rows)"),
                  Param("merge", [2, 4], "token merging rates (tokens merged per block) for a ViT", quick=[2]),
                  Param("only", [""], "only these rows (names as in the table; torch fp32 is always kept)",
                        quick=["onnxruntime fp32"]),
                  Param("batch", 8, "latency batch", quick=2),
                  Param("eval_batch", 32, "evaluation batch"),
                  Param("rounds", 10, "alternating rounds", quick=1),
                  Param("threads", 2, "torch, onnxruntime and OpenVINO threads", quick=1),
                  Param("clock", "wall", "wall time, or cpu: this process's CPU time (with --threads 1, figures that "
                        "other work on a loaded machine cannot inflate)", choices=("wall", "cpu")),
              ), requires=("onnxruntime", "openvino", "nncf"), doc=__doc__)
