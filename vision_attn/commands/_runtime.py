"""``--runtime`` of ``predict`` and ``eval``: the run's network exported and run by another runtime.

:func:`add_runtime_argument` adds the option; :func:`runtime_of` gives the
:data:`~vision_attn.tasks.runs.Runtime` factory the task functions take (None for PyTorch itself),
an :class:`~vision_attn.export.runtimes.RuntimeModel` with this process's threads. The static INT8
runtimes (``onnxruntime-qdq``, ``openvino-int8``) are calibrated on the batches the task gives
(``eval``: the data's training images through the run's evaluation pipeline); ``predict``, which has
no such data, does not offer them.
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch

    from vision_attn.tasks.runs import Runtime

CHOICES = ("torch", "torch-frozen", "onnxruntime", "openvino", "onnxruntime-int8", "onnxruntime-qdq", "openvino-int8")
CALIBRATED = ("onnxruntime-qdq", "openvino-int8")  # export.runtimes.CALIBRATED, here so --help imports no torch


def add_runtime_argument(p: argparse.ArgumentParser, *, calibrates: bool) -> None:
    """``--runtime``; ``calibrates``: the command has data to calibrate the static INT8 runtimes on
    (``eval``), else they are not offered (``predict``: an INT8 model calibrated on random inputs would
    predict badly)."""
    choices = CHOICES if calibrates else tuple(c for c in CHOICES if c not in CALIBRATED)
    int8 = ("onnxruntime-int8 (dynamic), onnxruntime-qdq (static QDQ) or openvino-int8 (NNCF's static INT8), the "
            "static ones calibrated on the data's training images") if calibrates else "onnxruntime-int8 (dynamic INT8)"
    p.add_argument("--runtime", choices=choices, default="torch",
                   help=f"run the network in PyTorch (default), in PyTorch frozen for inference (torch-frozen: linear "
                   f"weights kept in oneDNN's layout), exported to onnxruntime or OpenVINO (FP32), or {int8}; "
                   "the export is made in a temporary folder and its inputs are squares of the run's image size")
    if calibrates:
        p.add_argument("--int8-model", default=None, metavar="FILE",
                       help="with --runtime openvino-int8 or onnxruntime-qdq: run this INT8 model (an .xml or QDQ "
                       ".onnx, e.g. `export quantize --qat`'s) instead of quantizing the run here")


def runtime_of(args: argparse.Namespace, precision: str = "fp32") -> Runtime | None:
    """The factory for ``args.runtime`` (None: PyTorch itself); ``precision``: ``fp32``, or ``bf16`` for the
    runtimes that run it (:func:`~vision_attn.export.runtimes.check_precision`)."""
    if args.runtime == "torch":
        if getattr(args, "int8_model", None) is not None:
            from vision_attn.errors import ConfigError

            raise ConfigError("--int8-model runs an INT8 file: add --runtime openvino-int8 (.xml) or "
                              "onnxruntime-qdq (.onnx)")
        return None
    import torch

    from vision_attn.export.runtimes import RuntimeModel

    def build(model: torch.nn.Module, hw: tuple[int, int],
              calibration: Callable[[], list[torch.Tensor]] | None) -> RuntimeModel:
        int8_model = getattr(args, "int8_model", None)
        batches = (calibration() if calibration is not None and args.runtime in CALIBRATED and int8_model is None
                   else None)
        return RuntimeModel(model, args.runtime, hw, precision=precision, threads=torch.get_num_threads(),
                            calibration=batches, int8_model=int8_model)

    return build
