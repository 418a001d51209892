"""OpenVINO export: the network's ONNX graph (:func:`~vision_attn.export.onnx.export_onnx`) converted to
OpenVINO's IR (``NAME.xml`` + ``NAME.bin``), and the compiled model for its parity check and benchmarks.

``openvino`` is an optional dependency (``pip install openvino``); without it the export is a
ConfigError with that command. The IR keeps FP32 weights (``precision="fp32"``) or compresses them to
FP16 (``"fp16"``, half the file); the arithmetic precision is a property of the compiled model, not of
the file: ``hint="f32"`` computes in float32, ``"bf16"`` in bfloat16 on CPUs with AMX or AVX-512 BF16
(OpenVINO's default there), ``"f16"`` in float16 where the CPU has it. Both files are written under
temporary names and renamed when complete (the ``.bin`` first), so a failed export leaves neither.
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.export.onnx import DEFAULT_OPSET, Exporter, export_onnx
from vision_attn.export.outputs import one_or_tuple
from vision_attn.export.signal_stack import kept_signal_stack
from vision_attn.io.atomic import atomic_write, output_folder

__all__ = ["OpenVinoExport", "export_openvino", "ir_path", "openvino_model", "run_openvino", "require_openvino", "save_ir"]

Precision = Literal["fp32", "fp16"]
Hint = Literal["f32", "bf16", "f16"]
INSTALL = "pip install openvino"


def require_openvino() -> Any:
    """The ``openvino`` module, or a ConfigError saying how to install it."""
    try:
        import openvino
    except ImportError:
        raise ConfigError(f"OpenVINO is not installed: {INSTALL} (or pip install 'vision-attn[openvino]')") from None
    return openvino


@dataclass
class OpenVinoExport:
    """What was written: the .xml and .bin files, the weights' precision, dynamic batch, export seconds."""

    xml: Path
    bin: Path
    precision: str
    dynamic_batch: bool
    seconds: float


def ir_path(path: str | os.PathLike) -> Path:
    """``path`` as the .xml file of an IR to be written (its weights go to the .bin beside it)."""
    path = Path(path)
    if path.suffix != ".xml":
        raise ConfigError(f"-o {path}: an OpenVINO model is an .xml file (its weights go to the .bin beside it)")
    return path


def export_openvino(model: nn.Module, path: str | os.PathLike, input_size: tuple[int, int], *,
                    dynamic_batch: bool = False, precision: Precision = "fp32", opset: int = DEFAULT_OPSET,
                    exporter: Exporter = "dynamo", output_names: tuple[str, ...] = ("output",)) -> OpenVinoExport:
    """``model`` as OpenVINO IR at ``path`` (``.xml``; the weights in the ``.bin`` beside it), converted
    from its ONNX export (same arguments as :func:`export_onnx`)."""
    ov = require_openvino()
    path = ir_path(path)
    if precision not in ("fp32", "fp16"):
        raise ConfigError(f"precision={precision!r}: choose fp32 or fp16")
    folder = output_folder(path)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=folder, prefix=f".{path.stem}.") as tmp:
        onnx_file = Path(tmp) / "model.onnx"
        export_onnx(model, onnx_file, input_size, dynamic_batch=dynamic_batch, opset=opset, exporter=exporter,
                    output_names=output_names)
        bin_path = save_ir(ov.convert_model(str(onnx_file)), path, compress_to_fp16=precision == "fp16")
    return OpenVinoExport(path, bin_path, precision, dynamic_batch, time.perf_counter() - start)


def save_ir(model: Any, path: Path, *, compress_to_fp16: bool = False) -> Path:
    """The ``openvino.Model`` ``model`` written to ``path`` (.xml) and the .bin beside it, each under a
    temporary name first (the .bin renamed before the .xml); returns the .bin's path."""
    ov = require_openvino()
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.stem}.") as tmp:
        staged = Path(tmp) / "model.xml"
        ov.save_model(model, str(staged), compress_to_fp16=compress_to_fp16)
        bin_path = path.with_suffix(".bin")
        atomic_write(bin_path, lambda t: os.replace(staged.with_suffix(".bin"), t))
        xml = staged.read_text(encoding="utf-8")
        atomic_write(path, lambda t: Path(t).write_text(xml, encoding="utf-8"))
    return bin_path


def openvino_model(path: str | os.PathLike, *, threads: int | None = None, hint: Hint = "f32") -> Any:
    """The IR at ``path`` compiled for the CPU with ``threads`` inference threads (default torch's) and
    the arithmetic precision ``hint``."""
    ov = require_openvino()
    if hint not in ("f32", "bf16", "f16"):
        raise ConfigError(f"precision hint {hint!r}: choose f32, bf16 or f16")
    core = ov.Core()
    with kept_signal_stack():  # the CPU plugin this creates swaps the thread's signal stack
        return core.compile_model(core.read_model(str(path)), "CPU", {
            "INFERENCE_NUM_THREADS": threads or torch.get_num_threads(), "INFERENCE_PRECISION_HINT": hint})


def run_openvino(compiled: Any, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """The compiled model's output for a float32 input tensor (a tuple when the graph has several: a
    segmenter's rows and prototypes)."""
    out = compiled(x.detach().to(torch.float32).contiguous().numpy())
    return one_or_tuple([torch.from_numpy(out[o].copy()) for o in compiled.outputs])
