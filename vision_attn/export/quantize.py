"""INT8 quantization of a ViT, Swin or detector, and what it costs and saves.

Static (``quantize_onnx_static``, ``vision-attn export quantize --static``): onnxruntime's
``quantize_static`` in the QDQ format, calibrated on a few hundred images of the run's own data (the
training images, the evaluation pipeline, a seeded sample): weights int8 per channel (7-bit range), activations
int8 with ranges from the calibration (MinMax), every Conv, MatMul and Gemm quantized except those of the
graph's float tail (:mod:`vision_attn.export.float_tail`: the operations after the last trainable weights, a
detector's box decoding), which stays in float; OpenVINO's (``quantize_openvino``, NNCF) keeps the same tail.

Dynamic, two ways (weights stored as int8, activations quantized per call, no calibration set):

- onnxruntime (:func:`quantize_onnx`): ``onnxruntime.quantization.quantize_dynamic`` rewrites the
  MatMul/Gemm nodes of an exported FP32 graph into MatMulInteger/DynamicQuantizeLinear; the result is a
  new .onnx file, about a quarter of the size. This is the path ``vision-attn export quantize`` takes.
- PyTorch (:func:`quantize_torch`): ``torch.ao.quantization.quantize_dynamic`` swaps ``nn.Linear`` for
  its quantized twin (the layers' :class:`~vision_attn.kernels.FusedLinear` modules become plain
  ``nn.Linear`` first, in the copy it quantizes). Deprecated in torch 2.14 (its warning says it moves
  to torchao); kept to compare.

:func:`folder_accuracy` measures top-1 of any ``images -> logits`` callable on a labelled folder.
"""
from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
import statistics
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection

import torch
from torch import nn
from torch.utils.data import DataLoader

from vision_attn.analysis.benchmark import alternate
from vision_attn.data import ImageFolder, eval_transforms, scan_folder
from vision_attn.data.calibration import detection_calibration, folder_calibration, labelled_folder
from vision_attn.errors import ConfigError, DataError, ExportError
from vision_attn.export.float_tail import fixed_weights, onnx_float_tail, openvino_float_tail
from vision_attn.export.onnx import DEFAULT_OPSET, Exporter, export_onnx, onnx_session, run_onnx
from vision_attn.export.openvino import (export_openvino, ir_path, openvino_model, require_openvino, run_openvino,
                                         save_ir)
from vision_attn.export.signal_stack import kept_signal_stack
from vision_attn.export.source import Deployable
from vision_attn.io.atomic import output_folder, write_onnx
from vision_attn.kernels import FusedLinear
from vision_attn.layers.window_attention import WindowAttention

__all__ = ["quantize_onnx", "quantize_onnx_static", "quantize_openvino", "quantize_torch",
           "folder_accuracy", "onnx_predictor", "quantize_and_compare", "QuantizeReport", "is_transformer"]


def _quantized(src: Path, dst: Path, kind: str, quantize: Callable[[str], None]) -> Path:
    """``quantize(tmp)`` (one of onnxruntime's quantizers, reading ``src``) written atomically to ``dst``;
    its advice to run onnxruntime's pre-processing first (logged on every call) silenced, its failure
    one ExportError line."""
    if not src.is_file():
        raise ConfigError(f"{src}: no such ONNX file")
    output_folder(dst)

    def write(tmp: str) -> None:
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)
        try:
            quantize(tmp)
        except Exception as e:  # noqa: BLE001 - onnxruntime's quantizers raise many types
            detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ExportError(f"{src}: onnxruntime's {kind} quantization failed ({detail[:300]})") from None
        finally:
            root.setLevel(level)

    write_onnx(dst, write)
    return dst


def quantize_onnx(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """``src`` (an FP32 .onnx) with int8 weights for its MatMul and Gemm nodes, written atomically to ``dst``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    return _quantized(Path(src), Path(dst), "dynamic", lambda tmp: quantize_dynamic(
        str(src), tmp, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"]))


def quantize_onnx_static(src: str | os.PathLike, dst: str | os.PathLike, batches: list[torch.Tensor], *,
                         fixed: Collection[str] = ()) -> Path:
    """``src`` (an FP32 .onnx with a free batch axis) quantized statically to int8 (QDQ: weights per
    channel, activation ranges from ``batches``), written atomically to ``dst``; the graph's float tail
    (``fixed``: the names of the model's untrained tensors, :func:`~vision_attn.export.float_tail.fixed_weights`)
    stays in float: it kept the demo detector's mAP@.5:.95 within 0.4 points of FP32 where quantizing its box
    decoding lost 5.2 (docs/deploy.md). Weights use 7 of the 8
    bits (``reduce_range``, onnxruntime's advice for CPUs without VNNI, whose int8 products of two
    full-range operands saturate): on this AVX2 host it kept the demo classifier at 99.44% top-1, where
    full-range weights gave 98.89% (FP32: 99.72%)."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    if not batches:
        raise ConfigError("static INT8 needs calibration images: give --data (a labelled folder or demo:digits)")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(batches)

        def get_next(self):
            x = next(self.items, None)
            return None if x is None else {"images": x.numpy()}

    def quantize(tmp: str) -> None:
        tail = onnx_float_tail(onnx.load(str(src), load_external_data=False).graph, fixed)
        quantize_static(str(src), tmp, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        weight_type=QuantType.QInt8, activation_type=QuantType.QInt8,
                        op_types_to_quantize=["Conv", "MatMul", "Gemm"], reduce_range=True, nodes_to_exclude=tail)

    return _quantized(Path(src), Path(dst), "static", quantize)


NNCF_INSTALL = "pip install nncf"


def _require_nncf():  # noqa: ANN202 - the nncf module
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # NNCF imports it: "No CUDA runtime"
    try:
        import nncf
    except ImportError:
        raise ConfigError(f"NNCF is not installed (OpenVINO's INT8 quantizer): {NNCF_INSTALL} (or pip install "
                          "'vision-attn[openvino]')") from None
    return nncf


def is_transformer(model: nn.Module) -> bool:
    """Whether ``model`` has attention layers (NNCF's transformer scheme then keeps softmax, layer norm and
    the attention products' inputs where they quantize badly)."""
    return any("Attention" in type(m).__name__ for m in model.modules())


def quantize_openvino(src: str | os.PathLike, dst: str | os.PathLike, batches: list[torch.Tensor], *,
                      transformer: bool = False, fixed: Collection[str] = (),
                      validation: tuple[list[tuple[torch.Tensor, torch.Tensor]], float] | None = None) -> Path:
    """The OpenVINO IR ``src`` quantized to INT8 by NNCF's post-training quantization, activation ranges
    calibrated on ``batches``, written to ``dst`` (.xml and .bin). ``transformer``: NNCF's transformer
    scheme. The graph's float tail stays in float, as in :func:`quantize_onnx_static` (``fixed``: the
    same). ``validation``: ``(labelled batches, max_drop)``: NNCF's accuracy-aware quantization, which
    returns layers to FP32, most harmful first, until top-1 on those batches is within ``max_drop``
    (a fraction, absolute) of the FP32 model's."""
    ov = require_openvino()
    nncf = _require_nncf()
    dst = ir_path(dst)
    output_folder(dst)
    if not batches:
        raise ConfigError("OpenVINO INT8 needs calibration images: give --data (a labelled folder or demo:digits)")
    nncf.set_log_level(logging.ERROR)  # its progress bars and notes are not ours to print
    model = ov.Core().read_model(str(src))
    calibration = nncf.Dataset([b.numpy() for b in batches])
    tail = openvino_float_tail(model, fixed)
    options = {"subset_size": len(batches), "model_type": nncf.ModelType.TRANSFORMER if transformer else None,
               "ignored_scope": nncf.IgnoredScope(names=tail, validate=False) if tail else None}
    with contextlib.redirect_stdout(io.StringIO()), kept_signal_stack():  # progress bars (rich); NNCF's CPU plugins
        quantized = _nncf_quantize(nncf, model, calibration, options, validation)
    save_ir(quantized, dst)
    return dst


def _nncf_quantize(nncf, model, calibration, options: dict, validation):  # noqa: ANN001, ANN202 - NNCF's types
    if validation is None:
        return nncf.quantize(model, calibration, **options)
    labelled, max_drop = validation

    def top1(compiled, items) -> float:  # noqa: ANN001 - NNCF's compiled model and its data items
        correct = total = 0
        for x, y in items:
            logits = compiled(x.numpy())[compiled.outputs[0]]
            correct += int((logits.argmax(axis=-1) == y.numpy()).sum())
            total += len(y)
        return correct / max(total, 1)

    return nncf.quantize_with_accuracy_control(
        model, calibration, nncf.Dataset(labelled), validation_fn=top1, max_drop=max_drop,
        drop_type=nncf.DropType.ABSOLUTE, **options)


def _torch_quantizable(model: nn.Module) -> set[str]:
    """Names of the linear modules (``nn.Linear``, and :class:`~vision_attn.kernels.FusedLinear` in an
    accelerated model) that are called as modules. Swin's window attention reads its ``qkv`` weight
    directly (to reorder it by head), so that one stays FP32."""
    direct = {f"{name}.qkv" if name else "qkv" for name, m in model.named_modules() if isinstance(m, WindowAttention)}
    return {name for name, m in model.named_modules() if type(m) in (nn.Linear, FusedLinear) and name not in direct}


def _as_plain_linears(model: nn.Module, names: set[str]) -> nn.Module:
    """``model`` (changed in place) with each :class:`~vision_attn.kernels.FusedLinear` named in ``names``
    replaced by an ``nn.Linear`` holding the same parameters: ``quantize_dynamic`` swaps only modules of
    exactly that type."""
    for name in names:
        layer = model.get_submodule(name)
        if type(layer) is not FusedLinear:
            continue
        plain = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None, device="meta")
        plain.weight, plain.bias = layer.weight, layer.bias
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent), attr, plain)
    return model


def quantize_torch(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with its linear layers dynamically quantized to int8 (PyTorch's deprecated
    eager-mode API; its deprecation warnings are silenced here and documented in docs/deploy.md)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import quantize_dynamic

        names = _torch_quantizable(model)
        plain = _as_plain_linears(copy.deepcopy(model).eval(), names)
        return quantize_dynamic(plain, names, dtype=torch.qint8)


def onnx_predictor(path: str | os.PathLike, threads: int | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """``images (B, 3, H, W) -> logits`` through an onnxruntime session of ``path``."""
    session = onnx_session(path, threads)
    return lambda x: run_onnx(session, x)[0]


@torch.no_grad()
def folder_accuracy(predict: Callable[[torch.Tensor], torch.Tensor], data: str | os.PathLike,
                    transform: Callable, classes: list[str], *, batch_size: int = 64) -> tuple[float, int]:
    """(top-1, images) of ``predict`` on ``data``: its ``val/`` folder if it has one (``demo:digits``
    included), else its class folders; the folder's classes must be among ``classes``."""
    folder = labelled_folder(data, "val")
    scan = scan_folder(folder, classes=classes, role="eval")
    loader = DataLoader(ImageFolder(scan.samples, classes, transform), batch_size=batch_size)
    correct = total = 0
    for x, y in loader:
        correct += int((predict(x).argmax(dim=-1) == y).sum())
        total += len(y)
    if total == 0:
        raise DataError(f"--data {data}: no images found in {folder}")
    return correct / total, total


@dataclass
class QuantizeReport:
    """What :func:`quantize_and_compare` measured: file sizes (MiB), median latencies (ms per image at
    ``batch``) and, with labelled data, top-1 of both files on ``images`` images."""

    fp32_mib: float
    int8_mib: float
    batch: int
    fp32_ms: float
    int8_ms: float
    fp32_top1: float | None = None
    int8_top1: float | None = None
    images: int = 0


def _latency_ms(steps: dict[str, Callable[[], object]], batch: int, rounds: int) -> dict[str, float]:
    for fn in steps.values():  # warm-up
        fn()
    rows = alternate(steps, rounds=rounds, iters=1, items=batch)
    return {k: 1e3 * batch / statistics.median(r[k] for r in rows) for k in steps}


def _calibration(dep: Deployable, data: str | os.PathLike, transform: Callable, images: int) -> list[torch.Tensor]:
    """Calibration batches of ``data``'s training split as ``dep`` sees them: a classifier's through its
    evaluation transform, a detector's (and any box model's: segmenter, pose, oriented boxes) letterboxed
    to its square input."""
    if dep.boxes:
        return detection_calibration(data, dep.input_size[0], images=images)
    return folder_calibration(data, transform, dep.classes, images=images)


def _add_top1(report: QuantizeReport, fp32: Callable[[torch.Tensor], torch.Tensor],
              int8: Callable[[torch.Tensor], torch.Tensor], dep: Deployable, data: str | os.PathLike | None,
              transform: Callable) -> None:
    """A trained classifier's top-1 of both models on ``data``'s val folder, into ``report`` (a
    detector's mAP is ``eval det --runtime``'s; without ``data``, nothing)."""
    if data is not None and dep.kind == "classifier":
        report.fp32_top1, report.images = folder_accuracy(fp32, data, transform, dep.classes)
        report.int8_top1, _ = folder_accuracy(int8, data, transform, dep.classes)


def quantize_and_compare(dep: Deployable, output: str | os.PathLike, *, fp32_output: str | os.PathLike | None = None,
                         data: str | os.PathLike | None = None, batch: int = 8, rounds: int = 10,
                         opset: int = DEFAULT_OPSET, exporter: Exporter = "dynamo", static: bool = False,
                         calibration_images: int = 256, runtime: str = "onnxruntime",
                         max_drop: float | None = None) -> QuantizeReport:
    """Export ``dep`` to FP32 ONNX (``fp32_output``, else a temporary file beside ``output``), write its
    INT8 version to ``output`` (dynamic; ``static``: calibrated on ``calibration_images`` images of
    ``data``'s training split: class folders for a classifier, a detection set for a detector), and
    measure both: size, latency (alternating rounds, median) and, for a trained classifier with
    ``data``, top-1 accuracy on its val folder (a detector's mAP: ``eval det --runtime``).

    ``runtime="openvino"``: the FP32 model is OpenVINO IR and the INT8 one NNCF's static quantization
    of it (always calibrated; ``output`` an .xml); ``max_drop`` (top-1 points): NNCF's accuracy-aware
    mode against ``data``'s val folder."""
    if runtime not in ("onnxruntime", "openvino"):
        raise ConfigError(f"--runtime {runtime!r}: choose onnxruntime or openvino")
    openvino = runtime == "openvino"
    if openvino:
        require_openvino()
        _require_nncf()
        if data is None:
            raise ConfigError("--runtime openvino quantizes statically, calibrated on the run's own images: give "
                              "--data (the training data root, e.g. demo:digits)")
    elif max_drop is not None:
        raise ConfigError("--max-drop is NNCF's accuracy-aware quantization: add --runtime openvino")
    if max_drop is not None and dep.kind == "detector":
        raise ConfigError("--max-drop bounds the drop of a classifier's top-1; for a detector, quantize without it "
                          "and compare the mAP of both with `eval det --runtime`")
    if static and data is None:
        raise ConfigError("--static calibrates on the run's own images: give --data (the training data root, "
                          "e.g. demo:digits)")
    if data is not None and dep.classes is None:
        raise ConfigError("--data needs a trained run: give --checkpoint runs/NAME (its class names map the data's "
                          "classes to outputs)")
    output = ir_path(output) if openvino else Path(output)
    folder = output_folder(output)
    if openvino:
        return _quantize_openvino_and_compare(dep, output, fp32_output=fp32_output, data=data, batch=batch,
                                              rounds=rounds, opset=opset, exporter=exporter,
                                              calibration_images=calibration_images, max_drop=max_drop)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".fp32-") as tmp:
        fp32_path = Path(fp32_output) if fp32_output else Path(tmp) / "model.onnx"
        export_onnx(dep.model, fp32_path, dep.input_size, dynamic_batch=True, opset=opset, exporter=exporter)
        transform = dep.transform or eval_transforms(dep.input_size, mean=dep.mean, std=dep.std)
        if static:
            quantize_onnx_static(fp32_path, output, _calibration(dep, data, transform, calibration_images),
                                 fixed=fixed_weights(dep.model))
        else:
            quantize_onnx(fp32_path, output)
        fp32, int8 = onnx_predictor(fp32_path), onnx_predictor(output)
        x = torch.randn(batch, 3, *dep.input_size)
        ms = _latency_ms({"fp32": lambda: fp32(x), "int8": lambda: int8(x)}, batch, rounds)
        report = QuantizeReport(os.path.getsize(fp32_path) / 2**20, os.path.getsize(output) / 2**20, batch,
                                ms["fp32"], ms["int8"])
        _add_top1(report, fp32, int8, dep, data, transform)
    return report


def _quantize_openvino_and_compare(dep: Deployable, output: Path, *, fp32_output: str | os.PathLike | None,
                                   data: str | os.PathLike, batch: int, rounds: int, opset: int, exporter: Exporter,
                                   calibration_images: int, max_drop: float | None) -> QuantizeReport:
    """:func:`quantize_and_compare` in OpenVINO, its arguments checked there."""
    transform = dep.transform or eval_transforms(dep.input_size, mean=dep.mean, std=dep.std)
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=".fp32-") as tmp:
        fp32_path = Path(fp32_output) if fp32_output else Path(tmp) / "model.xml"
        export_openvino(dep.model, fp32_path, dep.input_size, dynamic_batch=True, opset=opset, exporter=exporter)
        validation = None
        if max_drop is not None:
            folder = labelled_folder(data, "val")
            scan = scan_folder(folder, classes=dep.classes, role="eval")
            validation = (list(DataLoader(ImageFolder(scan.samples, dep.classes, transform), batch_size=64)),
                          max_drop / 100)
        quantize_openvino(fp32_path, output, _calibration(dep, data, transform, calibration_images),
                          transformer=is_transformer(dep.model), fixed=fixed_weights(dep.model),
                          validation=validation)
        compiled = {k: openvino_model(p, hint="f32") for k, p in (("fp32", fp32_path), ("int8", output))}
        fp32, int8 = ((lambda x, c=c: run_openvino(c, x)) for c in compiled.values())
        x = torch.randn(batch, 3, *dep.input_size)
        ms = _latency_ms({"fp32": lambda: fp32(x), "int8": lambda: int8(x)}, batch, rounds)
        size = {k: sum(os.path.getsize(p.with_suffix(e)) for e in (".xml", ".bin")) / 2**20
                for k, p in (("fp32", fp32_path), ("int8", output))}
        report = QuantizeReport(size["fp32"], size["int8"], batch, ms["fp32"], ms["int8"])
        _add_top1(report, fp32, int8, dep, data, transform)
    return report
