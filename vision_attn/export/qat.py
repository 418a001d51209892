"""Quantization-aware training (QAT) of a trained run: NNCF's PyTorch flow, fine-tuned by the run's own
task, exported to OpenVINO INT8 and onnxruntime QDQ.

:func:`quantize_aware`:

1. the run's network (its EMA weights, :func:`~vision_attn.export.source.load_deployable`) goes through
   ``nncf.quantize``, which traces it and inserts FakeQuantize modules (int8 weights per channel,
   int8 activations) at the inputs of every convolution, linear layer and matrix product, those of
   attention (``scaled_dot_product_attention``'s query, key and value) included, with NNCF's
   transformer scheme for a network with attention layers (softmax and layer norm stay in floating
   point) and its ranges calibrated on the run's training images (as ``export quantize --static``);
2. the fake-quantized network is fine-tuned by the task's own LightningModule and data module (the
   record's ``module`` and ``datamodule`` built from the checkpoint's hyper-parameters, so its
   ``training_step``, loss, augmentation and optimizer are the run's), for ``epochs`` (or ``steps``)
   at ``lr_scale`` times the run's learning rate, without warm-up or EMA; the quantizers' ranges
   train with the weights;
3. the result is exported twice: OpenVINO IR with FakeQuantize nodes (``model.int8.xml``; OpenVINO
   runs them as int8) and ONNX with QuantizeLinear/DequantizeLinear pairs (``model.qdq.onnx``, run by
   onnxruntime), each checked against the fake-quantized PyTorch network
   (:func:`~vision_attn.export.verify.verify_outputs`), into a folder written atomically (nothing is
   left when a step fails).

NNCF runs its fake quantization through a C++ extension that it compiles on first use (over 60 s on
a loaded 2-core host, per user cache, and its own time-out aborts it there); its pure-PyTorch reference
functions, which it falls back to when the compile fails, are selected here directly.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import yaml
from torch import nn

from vision_attn.data import eval_transforms
from vision_attn.errors import ConfigError, ExportError
from vision_attn.export.onnx import export_onnx, onnx_session, run_onnx
from vision_attn.export.openvino import export_openvino, openvino_model, require_openvino, run_openvino
from vision_attn.export.outputs import graph_outputs, one_or_tuple
from vision_attn.export.quantize import _calibration, _require_nncf, folder_accuracy, is_transformer
from vision_attn.export.source import Deployable, load_deployable
from vision_attn.export.verify import verify_outputs
from vision_attn.export.float_tail import after_last_weight
from vision_attn.io.atomic import atomic_folder, write_json
from vision_attn.io.state_dict import read_checkpoint, run_checkpoint_path
from vision_attn.tasks.registry import get_task

__all__ = ["QatReport", "quantize_aware", "fake_quantize", "float_tail", "QAT_FILES", "PARITY_SCALE"]

QAT_FILES = {"openvino": "model.int8.xml", "onnxruntime": "model.qdq.onnx"}
# int8 kernels round where the fake quantization rounds in float32 (and sum in another order): the INT8
# model may differ from the fake-quantized PyTorch one by a few quantization steps at an output
# (measured: 2e-3 of logits up to 0.4 on the test's ViT; on the demo classifier 0.022 of logits up to
# about 10 on one AVX-512 host, 0.032 of 3.7 after calibration alone and 0.063 of about 4 after one
# epoch on another, with VNNI and AMX, in onnxruntime); the check allows 3% of the largest output (at
# least 3e-2), 300x the FP32 export's tolerance per unit of output: a wrong graph is off by the
# output's own size
PARITY_SCALE = 300.0


@dataclass
class QatReport:
    """What :func:`quantize_aware` wrote and measured: the folder and its files, the fine-tune's
    ``steps``, the largest difference of each export from the fake-quantized PyTorch network, and for a
    classifier with labelled data, top-1 of the FP32 network and of each INT8 export on ``images``
    val images."""

    folder: Path
    files: dict[str, Path]
    steps: int
    epochs: int
    quantizers: int
    task: str = ""
    parity: dict[str, float] = field(default_factory=dict)
    top1: dict[str, float] = field(default_factory=dict)
    images: int = 0
    network: nn.Module | None = field(default=None, repr=False)  # the fine-tuned fake-quantized PyTorch network


def _reference_fake_quantize() -> None:
    """NNCF's fake quantization through its pure-PyTorch reference functions (see the module docstring)."""
    from nncf.torch.quantization.extensions import QuantizedFunctionsCPU
    from nncf.torch.quantization.reference import ReferenceBackendType, ReferenceQuantize

    ref = ReferenceQuantize(backend_type=ReferenceBackendType.TORCH)

    class Functions:
        Quantize_forward = staticmethod(ref.forward)
        Quantize_backward = staticmethod(ref.backward)

    QuantizedFunctionsCPU._loaded_namespace = Functions


@contextlib.contextmanager
def _layer_stack(model: nn.Module) -> Iterator[list[str]]:
    """The names of the layers of ``model`` being run while the block runs (the innermost last); after a
    failure inside a layer, the stack still holds it."""
    stack: list[str] = []
    names = {id(m): n for n, m in model.named_modules()}

    def enter(m: nn.Module, _args: Any) -> None:
        stack.append(names.get(id(m), type(m).__name__))

    def leave(m: nn.Module, _args: Any, _out: Any) -> None:
        if stack:
            stack.pop()

    handles = [m.register_forward_pre_hook(enter) for m in model.modules()]
    handles += [m.register_forward_hook(leave) for m in model.modules()]
    try:
        yield stack
    finally:
        for h in handles:
            h.remove()


def _layer_calling(model: nn.Module, op: str, x: torch.Tensor) -> str | None:
    """The name of the innermost layer of ``model`` whose forward calls the ATen operator ``op``
    (``aten::name``) on ``x``; None when none does."""
    from torch.utils._python_dispatch import TorchDispatchMode

    found: list[str] = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 - torch's hook
            if not found and func._schema.name == op and stack:
                found.append(stack[-1])
            return func(*args, **(kwargs or {}))

    with _layer_stack(model) as stack, Spy(), torch.no_grad():
        model(x)
    return found[0] if found else None


def _layer_of(model: nn.Module, name: str) -> str:
    layer = model.get_submodule(name) if name else model
    return f"layer {name or '(root)'} ({type(layer).__name__})"


def _quiet() -> contextlib.ExitStack:
    """NNCF's progress bars (stdout) and its and PyTorch's tracing warnings silenced."""
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    return stack


def fake_quantize(model: nn.Module, batches: list[torch.Tensor], *, label: str = "the model") -> nn.Module:
    """``model`` (changed in place and returned) with NNCF's FakeQuantize modules, ranges calibrated on
    ``batches``; a layer NNCF cannot trace or quantize is one ExportError line naming it."""
    nncf = _require_nncf()
    nncf.set_log_level(logging.ERROR)
    _reference_fake_quantize()
    model.eval()
    tail = float_tail(model, batches[0][:1])
    options = {"subset_size": sum(len(b) for b in batches),
               "model_type": nncf.ModelType.TRANSFORMER if is_transformer(model) else None,
               "ignored_scope": nncf.IgnoredScope(names=tail, validate=False) if tail else None}
    failed: list[str] = []
    try:
        with _quiet(), _layer_stack(model) as stack:
            try:
                return nncf.quantize(model, nncf.Dataset(batches), **options)
            finally:
                failed[:] = stack[-1:]
    except Exception as e:  # noqa: BLE001 - NNCF and the traced layers raise many types
        where = _layer_of(model, failed[0]) if failed else "a layer"
        detail = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise ExportError(f"{label}: NNCF cannot quantize {where}: {type(e).__name__}: {detail}; quantization-aware "
                          "training needs every layer traceable by NNCF (use export quantize --static, or "
                          "replace the layer)") from None


def float_tail(model: nn.Module, example: torch.Tensor) -> list[str]:
    """NNCF's names of the operations of ``model`` after its last trainable layers: those from which no
    convolution, linear layer or product with a trainable weight is reached on the way to the outputs.
    A detector's are its box decoding (the DFL's softmax and its fixed convolution, the distance-to-box
    arithmetic, the sigmoid of the scores and the concatenation of the rows); quantized, they round
    box sides to 8 bits of the image (0.6-2.5 px at 160 px, a loss of mAP@.5:.95 that fine-tuning
    cannot train away, the quantized steps being after every weight). They stay in floating point, as
    OpenVINO's own YOLO recipes keep the head's decoding; a classifier's head ends with its last linear
    layer, so it has none."""
    from nncf.torch.function_hook.nncf_graph.nncf_graph_builder import build_nncf_graph

    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    with _quiet():
        graph = build_nncf_graph(model, example)
    tail = after_last_weight(graph.topological_sort(),
                             lambda node: any(p.node_name in trainable for p in graph.get_previous_nodes(node)),
                             graph.get_next_nodes, key=lambda node: node.node_name)
    return [n.node_name for n in tail if n.node_type not in ("nncf_model_input", "nncf_model_output", "nncf_model_const")]


def _quantizers(model: nn.Module) -> list[nn.Module]:
    from nncf.torch.quantization.layers import BaseQuantizer

    return [m for m in model.modules() if isinstance(m, BaseQuantizer)]


def _set_export_mode(model: nn.Module, mode: str) -> None:
    from nncf.torch.quantization.layers import QuantizerExportMode

    for q in _quantizers(model):
        q.set_export_mode(QuantizerExportMode(mode))


def _data_key(task: Any) -> str:
    """The data module's argument that names the data set (the record's ``data.*`` path)."""
    keys = [k.split(".", 1)[1] for k in task.paths if k.startswith("data.")]
    if len(keys) != 1:
        raise ConfigError(f"task {task.name}: its record names no single data path (paths {sorted(task.paths)}); "
                          "quantization-aware training needs it to find the training set")
    return keys[0]


def _finetune(run: str | os.PathLike, network: nn.Module, data: str | None, *, epochs: int, steps: int | None,
              lr_scale: float, batch_size: int | None, say: Callable[[str], None]) -> int:
    """Fine-tune ``network`` (the fake-quantized run network) with the run's task: its LightningModule
    and data module rebuilt from the checkpoint's hyper-parameters; returns the optimizer steps taken."""
    import pytorch_lightning as pl

    file = run_checkpoint_path(run)
    ckpt = read_checkpoint(file)
    task = get_task(ckpt.get("task") or load_deployable(checkpoint=str(run)).task)
    data_hp = dict(ckpt.get("datamodule_hyper_parameters") or {})
    key = _data_key(task)
    if data is not None:
        data_hp[key] = data
    if data_hp.get(key) is None:
        raise ConfigError(f"{file}: the run records no training data; give --data (the data set it was trained on)")
    data_hp.update(num_workers=0, persistent_workers=False)
    if batch_size is not None:
        data_hp["batch_size"] = batch_size
    hp = _module_arguments(ckpt, task.module, lr_scale)
    with _quiet():
        module = task.module(**hp)
        datamodule = task.datamodule(**{k: v for k, v in data_hp.items() if k in _arguments(task.datamodule)})
    module.model = network.train()  # Lightning keeps each submodule's mode as it finds it
    say(f"fine-tuning {sum(1 for _ in network.parameters())} tensors with {task.name}'s training step, "
        f"{epochs} epoch(s){f', at most {steps} steps' if steps else ''}, lr {hp.get('lr', 0):.2g}")
    for name in ("pytorch_lightning", "lightning.pytorch"):  # its notes on accelerators and loggers
        logging.getLogger(name).setLevel(logging.ERROR)
    with _quiet():
        trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=epochs, max_steps=steps or -1, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             limit_val_batches=0, num_sanity_val_steps=0)
        trainer.fit(module, datamodule=datamodule)
    network.eval()
    return int(trainer.global_step)


def _module_arguments(ckpt: dict[str, Any], module: type, lr_scale: float) -> dict[str, Any]:
    """The arguments of the task's LightningModule for the fine-tune: the run's hyper-parameters, its
    rate times ``lr_scale``, no warm-up, EMA or pretrained weights; a detector's YAML as the model
    description the checkpoint records, not the path it was trained from (which may have moved)."""
    hp = dict(ckpt.get("hyper_parameters") or {})
    hp.update(ema_decay=None, lr=float(hp.get("lr", 1e-3)) * lr_scale, warmup_epochs=0.0, pretrained=None)
    if isinstance(ckpt.get("model_yaml"), dict) and "yaml" in hp:
        hp["yaml"] = yaml.safe_dump(ckpt["model_yaml"], sort_keys=False)
    return {k: v for k, v in hp.items() if k in _arguments(module)}


def _arguments(cls: type) -> set[str]:
    """The keyword arguments ``cls(...)`` takes: its ``__init__``'s, and where that passes ``**kwargs`` on,
    its base classes' (a segmentation module takes the detection module's)."""
    import inspect

    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names


def _export_qdq(network: nn.Module, path: Path, dep: Deployable) -> None:
    """``network`` (its quantizers in QDQ mode) as ONNX at ``path``; an operator the exporter cannot
    write is one ExportError line naming the run's layer that calls it."""
    try:
        export_onnx(network, path, dep.input_size, dynamic_batch=True, exporter="torchscript",
                    output_names=graph_outputs(dep.model))
    except ConfigError as e:
        m = re.search(r"operator '(aten::[\w.]+)'", str(e))
        name = _layer_calling(dep.model, m.group(1), torch.zeros(1, 3, *dep.input_size)) if m else None
        op = m.group(1) if m else "an operator"
        where = _layer_of(dep.model, name) if name is not None else "a layer"
        raise ExportError(f"{dep.label}: {where} calls {op}, which the INT8 export (ONNX, then OpenVINO) cannot "
                          "write; quantization-aware training needs every layer exportable (replace the layer, or "
                          "use export quantize --static)") from None


def _check_exportable(network: nn.Module, dep: Deployable) -> None:
    """Fail before fine-tuning when the fake-quantized ``network`` cannot be exported (see :func:`_export_qdq`)."""
    with tempfile.TemporaryDirectory(prefix="vision_attn-qat-") as tmp, _quiet():
        _set_export_mode(network, "quantize_dequantize")
        try:
            _export_qdq(network, Path(tmp) / "check.onnx", dep)
        finally:
            _set_export_mode(network, "fake_quantize")


def _largest_output(network: nn.Module, dep: Deployable) -> float:
    """The largest absolute value ``network`` outputs for the parity check's random inputs (classifier
    logits; a detector's class scores, which are at most 1, and boxes, which the check holds to pixels)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 3, *dep.input_size, generator=gen)
    with torch.no_grad():
        out = network(x)
    first = out if isinstance(out, torch.Tensor) else out[0]
    return float(first.abs().max()) if dep.kind == "classifier" else 1.0


def _exported(network: nn.Module, folder: Path, dep: Deployable) -> tuple[dict[str, Path], dict[str, float],
                                                                         dict[str, Callable]]:
    """The fake-quantized ``network`` as OpenVINO INT8 IR and onnxruntime QDQ in ``folder``, each
    verified against it; (files, largest differences, runners)."""
    outputs = graph_outputs(dep.model)
    checked = Deployable(network, dep.kind, dep.input_size, dep.label, mean=dep.mean, std=dep.std)
    files = {k: folder / v for k, v in QAT_FILES.items()}
    with _quiet():
        try:
            _set_export_mode(network, "fake_quantize")
            export_openvino(network, files["openvino"], dep.input_size, dynamic_batch=True, exporter="torchscript",
                            output_names=tuple(outputs))
            _set_export_mode(network, "quantize_dequantize")
            _export_qdq(network, files["onnxruntime"], dep)
        finally:
            _set_export_mode(network, "fake_quantize")
    compiled = openvino_model(files["openvino"], hint="f32")
    session = onnx_session(files["onnxruntime"])
    runners = {"openvino": lambda x: run_openvino(compiled, x), "onnxruntime": lambda x: one_or_tuple(run_onnx(session, x))}
    parity = {}
    scale = PARITY_SCALE * max(1.0, _largest_output(network, dep))
    for name, run in runners.items():
        report = verify_outputs(run, files[name], f"{name} INT8", checked, batches=(1, 3), scale=scale, factor=scale)
        parity[name] = max(report.max_diffs.values())
    return files, parity, runners


def quantize_aware(run: str | os.PathLike, output: str | os.PathLike, *, data: str | None = None, epochs: int = 1,
                   steps: int | None = None, lr_scale: float = 0.1, calibration_images: int = 256,
                   batch_size: int | None = None, say: Callable[[str], None] = lambda _: None) -> QatReport:
    """Quantization-aware fine-tune of the trained run ``run`` into the folder ``output`` (see the module
    docstring): ``model.int8.xml``/``.bin`` (OpenVINO), ``model.qdq.onnx`` (onnxruntime) and
    ``qat.json`` (this report). ``data``: the training set (default: the run's own); ``epochs`` /
    ``steps``: the fine-tune's length; ``lr_scale``: its learning rate as a fraction of the run's;
    ``calibration_images``: for the initial ranges. A classifier with a val folder in ``data`` also
    gets the top-1 of FP32 and both INT8 models."""
    require_openvino()
    _require_nncf()
    if epochs < 1 or (steps is not None and steps < 1):
        raise ConfigError(f"--epochs {epochs} / --steps {steps}: give at least one")
    if not 0 < lr_scale <= 1:
        raise ConfigError(f"--lr-scale {lr_scale}: give a fraction of the run's learning rate in (0, 1]")
    dep = load_deployable(checkpoint=str(run))
    file = run_checkpoint_path(run)
    recorded = dict(read_checkpoint(file).get("datamodule_hyper_parameters") or {})
    source = data or recorded.get(_data_key(get_task(dep.task)))
    if source is None:
        raise ConfigError(f"{file}: the run records no training data; give --data (the data set it was trained on)")
    transform = dep.transform or eval_transforms(dep.input_size, mean=dep.mean, std=dep.std)
    network = fake_quantize(_copy(dep.model), _calibration(dep, source, transform, calibration_images),
                            label=dep.label)
    quantizers = len(_quantizers(network))
    say(f"{dep.label}: {quantizers} fake quantizers inserted by NNCF")
    _check_exportable(network, dep)
    taken = _finetune(run, network, data, epochs=epochs, steps=steps, lr_scale=lr_scale, batch_size=batch_size,
                      say=say)
    report = QatReport(Path(output), {}, taken, epochs, quantizers, dep.task, network=network)

    def write(tmp: Path) -> None:
        files, report.parity, runners = _exported(network, tmp, dep)
        report.files = {k: Path(output) / p.name for k, p in files.items()}
        if dep.kind == "classifier" and dep.classes is not None:
            with torch.no_grad():
                report.top1["fp32"], report.images = folder_accuracy(dep.model, source, transform, dep.classes)
            for name, fn in runners.items():
                report.top1[name], _ = folder_accuracy(fn, source, transform, dep.classes)
        record = {"run": str(file), "folder": str(report.folder), "files": {k: str(v) for k, v in report.files.items()},
                  "steps": report.steps, "epochs": report.epochs, "quantizers": report.quantizers, "task": report.task,
                  "parity": report.parity, "top1": report.top1, "images": report.images}
        write_json(tmp / "qat.json", record)

    atomic_folder(output, write, error=ExportError)
    return report


def _copy(model: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(model)


def read_report(folder: str | os.PathLike) -> dict[str, Any]:
    """``qat.json`` of a QAT folder."""
    return json.loads((Path(folder) / "qat.json").read_text(encoding="utf-8"))
