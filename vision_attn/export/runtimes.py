"""A network run by another inference runtime behind the ``nn.Module`` interface, so that
``vision-attn benchmark --runtime torch,onnxruntime,openvino`` times every runtime of the same model
and batch side by side, alternating, with the same tools.

:class:`RuntimeModel` exports its model once (ONNX with the TorchScript exporter, and for OpenVINO
its IR, into a temporary folder removed with the object) and its ``forward`` runs the runtime on a
float32 tensor, returning what the PyTorch model returns (a segmenter: its rows and prototypes). ``reference`` is the PyTorch module it was exported from: FLOPs are counted on it.
Precision: ``fp32``; ``bf16`` is OpenVINO's ``bf16`` inference hint (onnxruntime's CPU provider has
no bfloat16 kernels for these graphs, so it is refused there). ``onnxruntime-int8`` runs the dynamic
INT8 graph of ``export quantize``; ``onnxruntime-qdq`` onnxruntime's static INT8 (QDQ, ``export
quantize --static``) and ``openvino-int8`` NNCF's static INT8 IR, both with activation ranges
calibrated on the ``calibration`` batches (``eval``: the data's training images), else on random
inputs (the same kernels and speed as a model calibrated on real images, for ``benchmark``).
``int8_model``: an INT8 file already made (``export quantize --qat``: the quantization-aware
model) run instead of quantizing the export here.
``torch-frozen`` is no export: a copy of the model readied once by :func:`vision_attn.kernels.freeze`
(weights in the precision, linear weights in oneDNN's layout), run eagerly on inputs cast to the
precision, its outputs returned in float32; in float32 under the process's kernel plan judged on this
model's inference step at ``batch`` (:func:`vision_attn.kernels.judged_plan`), as training and
``benchmark`` judge theirs; in bfloat16 under the process's plan.
"""
from __future__ import annotations

import contextlib
import copy
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torch.utils._pytree import tree_map

from vision_attn.errors import ConfigError
from vision_attn.export.onnx import export_onnx, onnx_session, run_onnx
from vision_attn.export.openvino import export_openvino, openvino_model, run_openvino
from vision_attn.export.outputs import graph_outputs, one_or_tuple
from vision_attn.export.float_tail import fixed_weights
from vision_attn.export.quantize import is_transformer, quantize_onnx, quantize_onnx_static, quantize_openvino
from vision_attn.kernels import KernelPlan, example_images, freeze, judged_plan, kernel_plan

__all__ = ["RUNTIMES", "INT8", "CALIBRATED", "RuntimeModel", "check_precision", "parse_runtimes"]

RUNTIMES = ("torch", "torch-frozen", "onnxruntime", "openvino", "onnxruntime-int8", "onnxruntime-qdq", "openvino-int8")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
INT8 = ("onnxruntime-int8", "onnxruntime-qdq", "openvino-int8")
CALIBRATED = ("onnxruntime-qdq", "openvino-int8")  # static INT8: activation ranges from calibration batches


def parse_runtimes(text: str) -> list[str]:
    """``"torch,openvino"`` -> ``["torch", "openvino"]``; an unknown name is a ConfigError."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in RUNTIMES]
    if unknown or not names:
        raise ConfigError(f"--runtime {text!r}: choose from {', '.join(RUNTIMES)} (comma-separated)")
    return list(dict.fromkeys(names))


def check_precision(runtime: str, precision: str) -> None:
    """A ConfigError for a precision ``runtime`` does not run here (before anything is measured)."""
    if precision not in ("fp32", "bf16"):
        raise ConfigError(f"precision {precision!r}: choose fp32 or bf16")
    if runtime in INT8 and precision != "fp32":
        raise ConfigError(f"--runtime {runtime} runs its INT8 model with the other layers in float32: use "
                          "--precision fp32")
    if runtime.startswith("onnxruntime") and precision != "fp32":
        raise ConfigError("--runtime onnxruntime runs fp32 only here (its CPU provider has no bfloat16 kernels "
                          "for these graphs); use --precision fp32, or openvino for bf16")


class RuntimeModel(nn.Module):
    """``model`` exported and run in ``runtime`` (one of :data:`RUNTIMES` but torch) for inputs of
    ``input_size`` (any batch), with ``threads`` (default torch's) and ``precision``; ``calibration``:
    batches of real inputs for the activation ranges of the static INT8 runtimes (:data:`CALIBRATED`);
    ``batch``: the batch size ``torch-frozen``'s kernel plan is judged at."""

    def __init__(self, model: nn.Module, runtime: str, input_size: tuple[int, int], *, precision: str = "fp32",
                 threads: int | None = None, calibration: list[torch.Tensor] | None = None,
                 int8_model: str | os.PathLike | None = None, batch: int = 1) -> None:
        super().__init__()
        if runtime not in RUNTIMES[1:]:
            raise ConfigError(f"runtime {runtime!r}: choose {', '.join(RUNTIMES[1:])} (torch is the model itself)")
        check_precision(runtime, precision)
        if int8_model is not None:
            int8_model = _quantized_file(runtime, int8_model)
        self.runtime, self.precision = runtime, precision
        self.reference = [model.eval()]  # a list: not a submodule (its parameters are not this module's)
        self._folder = tempfile.mkdtemp(prefix="vision_attn-runtime-")
        path = Path(self._folder) / "model"
        self._run: Callable[[torch.Tensor], torch.Tensor | tuple[torch.Tensor, ...]]
        if runtime in CALIBRATED and not calibration and int8_model is None:  # ranges from random inputs: the same kernels and speed
            gen = torch.Generator().manual_seed(0)
            calibration = [torch.randn(2, 3, *input_size, generator=gen) for _ in range(4)]
        outputs = graph_outputs(model)
        if runtime == "torch-frozen":
            dtype = DTYPES[precision]
            # judged in float32 only: the judge times eager steps, under autocast for bf16, which a model
            # frozen in bfloat16 does not run (its measured plan's explicit attention wins there)
            plan = judged_plan(model, example_images(batch, input_size), train=False) if dtype == torch.float32 else None
            with kernel_plan(plan) if plan is not None else contextlib.nullcontext():
                frozen = freeze(copy.deepcopy(model), dtype)
            self._run = lambda x: _run_frozen(frozen, x, dtype, plan)
        elif int8_model is not None and runtime.startswith("onnxruntime"):
            session = onnx_session(int8_model, threads)
            self._run = lambda x: one_or_tuple(run_onnx(session, x))
        elif int8_model is not None:
            compiled = openvino_model(int8_model, threads=threads, hint="f32")
            self._run = lambda x: run_openvino(compiled, x)
        elif runtime.startswith("onnxruntime"):
            file = path.with_suffix(".onnx")
            export_onnx(model, file, input_size, dynamic_batch=True, exporter="torchscript", output_names=outputs)
            if runtime == "onnxruntime-int8":
                file = quantize_onnx(file, path.with_name("int8.onnx"))
            elif runtime == "onnxruntime-qdq":
                file = quantize_onnx_static(file, path.with_name("qdq.onnx"), calibration, fixed=fixed_weights(model))
            session = onnx_session(file, threads)
            self._run = lambda x: one_or_tuple(run_onnx(session, x))
        else:
            file = path.with_suffix(".xml")
            export_openvino(model, file, input_size, dynamic_batch=True, exporter="torchscript", output_names=outputs)
            if runtime == "openvino-int8":
                file = quantize_openvino(file, path.with_name("int8.xml"), calibration,
                                         transformer=is_transformer(model), fixed=fixed_weights(model))
            compiled = openvino_model(file, threads=threads, hint="bf16" if precision == "bf16" else "f32")
            self._run = lambda x: run_openvino(compiled, x)

    @property
    def reference_model(self) -> nn.Module:
        """The PyTorch module this runs an export of (FLOPs are counted on it)."""
        return self.reference[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        return self._run(x)

    def __del__(self) -> None:
        shutil.rmtree(getattr(self, "_folder", ""), ignore_errors=True)


def _quantized_file(runtime: str, path: str | os.PathLike) -> Path:
    """``path``, an INT8 model already made (``export quantize --qat``'s, or ``--static``'s) for
    ``runtime``: a QDQ .onnx for onnxruntime-qdq, an .xml IR for openvino-int8."""
    suffix = {"onnxruntime-qdq": ".onnx", "openvino-int8": ".xml"}.get(runtime)
    if suffix is None:
        raise ConfigError(f"--int8-model takes --runtime onnxruntime-qdq (a .onnx) or openvino-int8 (an .xml), not "
                          f"{runtime}")
    path = Path(path)
    if path.suffix != suffix or not path.is_file():
        raise ConfigError(f"--int8-model {path}: no such {suffix} file (--runtime {runtime} runs a {suffix} model)")
    return path


def _run_frozen(model: nn.Module, x: torch.Tensor, dtype: torch.dtype,
                plan: KernelPlan | None) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """A frozen model's outputs in float32 for a float32 input, outside any caller's autocast (which
    would cast some of its bf16 ops back to float32), under ``plan`` (None: the process's)."""
    with (torch.inference_mode(), torch.autocast(x.device.type, enabled=False),
          kernel_plan(plan) if plan is not None else contextlib.nullcontext()):
        out = model(x.to(dtype))
    return tree_map(lambda t: t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t, out)
