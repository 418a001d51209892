"""A network run by another inference runtime behind the ``nn.Module`` interface, so that
``vision-attn benchmark --runtime torch,onnxruntime,openvino`` times every runtime of the same model
and batch side by side, alternating, with the same tools.

:class:`RuntimeModel` exports its model once (ONNX with the TorchScript exporter, and for OpenVINO
its IR, into a temporary folder removed with the object) and its ``forward`` runs the runtime on a
float32 tensor. ``reference`` is the PyTorch module it was exported from: FLOPs are counted on it.
Precision: ``fp32``; ``bf16`` is OpenVINO's ``bf16`` inference hint (onnxruntime's CPU provider has
no bfloat16 kernels for these graphs, so it is refused there).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.export.onnx import export_onnx, onnx_session, run_onnx
from vision_attn.export.openvino import export_openvino, openvino_model, run_openvino

__all__ = ["RUNTIMES", "RuntimeModel", "check_precision", "parse_runtimes"]

RUNTIMES = ("torch", "onnxruntime", "openvino")


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
    if runtime == "onnxruntime" and precision != "fp32":
        raise ConfigError("--runtime onnxruntime runs fp32 only here (its CPU provider has no bfloat16 kernels "
                          "for these graphs); use --precision fp32, or openvino for bf16")


class RuntimeModel(nn.Module):
    """``model`` exported and run in ``runtime`` (``"onnxruntime"`` or ``"openvino"``) for inputs of
    ``input_size`` (any batch), with ``threads`` (default torch's) and ``precision``."""

    def __init__(self, model: nn.Module, runtime: str, input_size: tuple[int, int], *, precision: str = "fp32",
                 threads: int | None = None) -> None:
        super().__init__()
        if runtime not in ("onnxruntime", "openvino"):
            raise ConfigError(f"runtime {runtime!r}: choose onnxruntime or openvino (torch is the model itself)")
        check_precision(runtime, precision)
        self.runtime, self.precision = runtime, precision
        self.reference = [model.eval()]  # a list: not a submodule (its parameters are not this module's)
        self._folder = tempfile.mkdtemp(prefix="vision_attn-runtime-")
        path = Path(self._folder) / "model"
        self._run: Callable[[torch.Tensor], torch.Tensor]
        if runtime == "onnxruntime":
            export_onnx(model, path.with_suffix(".onnx"), input_size, dynamic_batch=True, exporter="torchscript")
            session = onnx_session(path.with_suffix(".onnx"), threads)
            self._run = lambda x: run_onnx(session, x)[0]
        else:
            export_openvino(model, path.with_suffix(".xml"), input_size, dynamic_batch=True, exporter="torchscript")
            compiled = openvino_model(path.with_suffix(".xml"), threads=threads,
                                      hint="bf16" if precision == "bf16" else "f32")
            self._run = lambda x: run_openvino(compiled, x)

    @property
    def reference_model(self) -> nn.Module:
        """The PyTorch module this runs an export of (FLOPs are counted on it)."""
        return self.reference[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._run(x)

    def __del__(self) -> None:
        shutil.rmtree(getattr(self, "_folder", ""), ignore_errors=True)
