"""The float tail of a graph: the operations after its last trainable weights, which INT8 keeps in float.

One rule for every quantizer (QAT's NNCF graph in :mod:`vision_attn.export.qat`, onnxruntime's static
QDQ and NNCF's OpenVINO INT8 in :mod:`vision_attn.export.quantize`): an operation is in the tail when
no operation with a trainable weight is reachable from it on the way to the outputs. A weight is
trainable when its PyTorch parameter has ``requires_grad=True``; a buffer, or a parameter frozen like
the DFL's fixed ``0..reg_max`` convolution, is not. A detector's tail is its box decoding (the DFL's
softmax and fixed convolution, the distance-to-box arithmetic, the scores' sigmoid): quantized, it
rounds box sides to 8 bits of the image. A classifier's head ends in its last linear layer: no tail.

In an exported graph the weights are found by name: both ONNX exporters and OpenVINO's ONNX reader keep
a parameter's state-dict name for its initializer (constant) unless the exporter folded it into another
(TorchScript folds each BatchNorm into its convolution, under a new name: a trainable weight). So a
convolution or product counts as weighted when one of its operands is a constant (an initializer, or
computed from initializers and tensor shapes only) that is not made only of the model's fixed tensors
(:func:`fixed_weights`), and so does its epilogue when the graph keeps it apart: an addition or product
of its output with a constant (the bias of OpenVINO's convolutions and products and of a 3-d
``nn.Linear`` in ONNX, the ``alpha`` and ``beta`` of a Gemm read by OpenVINO)."""
from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from typing import Any, TypeVar

from torch import nn

__all__ = ["fixed_weights", "after_last_weight", "onnx_float_tail", "openvino_float_tail"]

N = TypeVar("N")

ONNX_WEIGHTED = ("Conv", "ConvTranspose", "MatMul", "Gemm")
EPILOGUE = ("Add", "Mul")
OPENVINO_WEIGHTED = ("Convolution", "GroupConvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData",
                     "MatMul")
OPENVINO_EPILOGUE = ("Add", "Multiply")


def fixed_weights(model: nn.Module) -> frozenset[str]:
    """State-dict names of ``model``'s tensors that are not trained: its frozen parameters
    (``requires_grad=False``) and its buffers."""
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    return frozenset(frozen | {name for name, _ in model.named_buffers()})


def after_last_weight(order: Sequence[N], weighted: Callable[[N], bool],
                      successors: Callable[[N], Iterable[N]], key: Callable[[N], Hashable] = id) -> list[N]:
    """The nodes of ``order`` (topologically sorted) from which no ``weighted`` node (themselves included)
    is reachable through ``successors``, in order."""
    reaches: dict[Hashable, bool] = {}
    for node in reversed(order):
        reaches[key(node)] = weighted(node) or any(reaches.get(key(n), False) for n in successors(node))
    return [n for n in order if not reaches[key(n)]]


def _trained_constants(sources: dict[str, list[str] | None], fixed: Collection[str]) -> dict[str, bool]:
    """For each constant value of a graph, whether it is made of a trainable tensor. ``sources``: value
    name -> None for a stored constant, [] for a tensor's shape (known when the graph runs, no weight:
    OpenVINO reshapes a bias to its convolution's output shape), else the value names it is computed
    from, topologically ordered; a computed value is constant when all its sources are."""
    trained: dict[str, bool] = {}
    for name, inputs in sources.items():
        if inputs is None:
            trained[name] = name not in fixed
        elif not inputs:
            trained[name] = False
        elif all(i in trained for i in inputs):
            trained[name] = any(trained[i] for i in inputs)
    return trained


def onnx_float_tail(graph: Any, fixed: Collection[str] = ()) -> list[str]:
    """Names of the nodes of the ONNX ``graph`` (an ``onnx.GraphProto``) in its float tail; ``fixed``:
    the names of the model's untrained tensors (:func:`fixed_weights`; none known: every stored weight
    counts as trained)."""
    nodes = list(graph.node)
    sources: dict[str, list[str] | None] = {i.name: None for i in graph.initializer}
    for n in nodes:
        for out in n.output:
            sources[out] = None if n.op_type == "Constant" else [] if n.op_type == "Shape" else \
                [i for i in n.input if i]
    trained = _trained_constants(sources, fixed)
    consumers: dict[str, list[Any]] = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    producer = {out: n for n in nodes for out in n.output}

    weighted_ids: set[int] = set()  # the kernels and their epilogues
    for n in nodes:
        if n.op_type in ONNX_WEIGHTED and any(trained.get(i, False) for i in n.input[:2]) or \
                n.op_type in EPILOGUE and any(trained.get(i, False) for i in n.input) and \
                any(i in producer and id(producer[i]) in weighted_ids for i in n.input):
            weighted_ids.add(id(n))

    def weighted(n: Any) -> bool:
        return id(n) in weighted_ids

    def successors(n: Any) -> list[Any]:
        return [c for out in n.output for c in consumers.get(out, [])]

    return [n.name for n in after_last_weight(nodes, weighted, successors) if n.name and n.op_type != "Constant"]


def openvino_float_tail(model: Any, fixed: Collection[str] = ()) -> list[str]:
    """Friendly names of the operations of the OpenVINO ``model`` (an ``openvino.Model``) in its float
    tail, as :func:`onnx_float_tail` (OpenVINO's Constant keeps the initializer's name)."""
    ops = list(model.get_ordered_ops())
    sources: dict[str, list[str] | None] = {}
    stored_fixed: set[str] = set()
    for op in ops:
        name = op.get_friendly_name()
        if op.get_type_name() == "Constant":
            sources[name] = None
            if name in fixed or op.output(0).get_names() & set(fixed):
                stored_fixed.add(name)
        elif op.get_type_name() == "ShapeOf":
            sources[name] = []
        elif op.get_type_name() != "Parameter":
            sources[name] = [v.get_node().get_friendly_name() for v in op.input_values()]
    trained = _trained_constants(sources, stored_fixed)

    weighted_names: set[str] = set()  # the kernels and their epilogues
    for op in ops:
        inputs = [v.get_node().get_friendly_name() for v in op.input_values()]
        if op.get_type_name() in OPENVINO_WEIGHTED and any(trained.get(i, False) for i in inputs[:2]) or \
                op.get_type_name() in OPENVINO_EPILOGUE and any(trained.get(i, False) for i in inputs) and \
                any(i in weighted_names for i in inputs):
            weighted_names.add(op.get_friendly_name())

    def weighted(op: Any) -> bool:
        return op.get_friendly_name() in weighted_names

    def successors(op: Any) -> list[Any]:
        return [t.get_node() for out in op.outputs() for t in out.get_target_inputs()]

    tail = after_last_weight(ops, weighted, successors, key=lambda op: op.get_friendly_name())
    return [op.get_friendly_name() for op in tail if op.get_type_name() not in ("Parameter", "Result", "Constant")]
