"""Post-training INT8 keeps the graph's float tail (the operations after the last trainable weights: a
detector's box decoding) in float, in onnxruntime's static QDQ and in NNCF's OpenVINO INT8; a
classifier has no tail, so its INT8 is unchanged."""
from __future__ import annotations

import onnx
import torch

import vision_attn
from vision_attn.export import export_onnx
from vision_attn.export.float_tail import fixed_weights, onnx_float_tail, openvino_float_tail
from vision_attn.export.openvino import export_openvino
from vision_attn.export.quantize import quantize_onnx_static, quantize_openvino
from vision_attn.export.source import load_deployable
from tests.checkpoints import VIT_KW, yolo_checkpoint

DECODING = ("/model.22/dfl/Softmax", "/model.22/dfl/conv/Conv", "/model.22/Sub", "/model.22/Div", "/model.22/Sigmoid")


def _calibration() -> list[torch.Tensor]:
    return [torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))]


def test_static_qdq_of_a_detector_leaves_its_box_decoding_in_float(tmp_path):
    dep = load_deployable(checkpoint=str(yolo_checkpoint(tmp_path / "best.ckpt", img_size=32)))
    model = dep.model.eval()
    assert fixed_weights(model) >= {"model.22.dfl.conv.weight"}
    fp32 = export_onnx(model, tmp_path / "m.onnx", (32, 32), dynamic_batch=True, exporter="torchscript").path
    tail = onnx_float_tail(onnx.load(str(fp32)).graph, fixed_weights(model))
    assert set(DECODING) <= set(tail)
    assert not any(n.startswith("/model.22/cv") for n in tail)  # the head's trainable convolutions are not
    assert "/model.22/dfl/conv/Conv" not in onnx_float_tail(onnx.load(str(fp32)).graph)  # without: a weight
    out = quantize_onnx_static(fp32, tmp_path / "m.qdq.onnx", _calibration(), fixed=fixed_weights(model))
    graph = onnx.load(str(out)).graph
    by_output = {o: n for n in graph.node for o in n.output}
    quantized_inputs = {n.input[0] for n in graph.node if n.op_type == "QuantizeLinear"}
    assert not any(by_output[i].name in tail for i in quantized_inputs if i in by_output)
    convs = [n for n in graph.node if n.op_type == "Conv"]
    dequantized = [n for n in convs if all(by_output[i].op_type == "DequantizeLinear" for i in n.input[:2])]
    assert [n.name for n in convs if n not in dequantized] == ["/model.22/dfl/conv/Conv"]
    assert len(dequantized) == len(convs) - 1 > 50


def test_openvino_int8_of_a_detector_leaves_its_box_decoding_in_float(tmp_path):
    """Through the dynamo exporter (``export quantize``'s default), whose node names carry no module path:
    the weights are told apart by their names, which it keeps; OpenVINO adds each bias apart."""
    import openvino as ov

    dep = load_deployable(checkpoint=str(yolo_checkpoint(tmp_path / "best.ckpt", img_size=32)))
    model = dep.model.eval()
    fp32 = export_openvino(model, tmp_path / "m.xml", (32, 32), dynamic_batch=True, exporter="dynamo").xml
    graph = ov.Core().read_model(str(fp32))
    ops = {op.get_friendly_name(): op for op in graph.get_ordered_ops()}
    convs = [name for name, op in ops.items() if op.get_type_name() == "Convolution"]
    dfl = [c for c in convs if ops[c].input_value(1).get_node().get_friendly_name() == "model.22.dfl.conv.weight"]
    tail = openvino_float_tail(graph, fixed_weights(model))
    kinds = {ops[n].get_type_name() for n in tail}
    assert len(dfl) == 1 and dfl[0] in tail and {"Softmax", "Sigmoid", "Subtract"} <= kinds
    assert [n for n in tail if ops[n].get_type_name() == "Convolution"] == dfl  # the head's trainable ones are not,
    biases = [t.get_node().get_friendly_name() for c in convs if c not in dfl
              for t in ops[c].output(0).get_target_inputs() if t.get_node().get_type_name() == "Add"]
    assert len(biases) == 6 and not set(biases) & set(tail)  # nor the biases added to the 6 last ones
    out = quantize_openvino(fp32, tmp_path / "q.xml", _calibration(), fixed=fixed_weights(model))
    ops = {op.get_friendly_name(): op for op in ov.Core().read_model(str(out)).get_ordered_ops()}

    def fake_quantized(name: str) -> bool:
        return any(v.get_node().get_type_name() == "FakeQuantize" for v in ops[name].input_values())

    def int8(node) -> bool:  # noqa: ANN001 - an OpenVINO node: a weight stored as int8 (Constant, Convert, Multiply)
        if node.get_type_name() == "Constant":
            return node.get_output_element_type(0) == ov.Type.i8
        return any(int8(v.get_node()) for v in node.input_values())

    assert [c for c in convs if not int8(ops[c].input_value(1).get_node())] == dfl
    assert not any(fake_quantized(n) for n in tail if n in ops)


def test_a_classifier_has_no_float_tail(tmp_path):
    """Its head ends in its last trainable linear layer: nothing stays in float, its INT8 is as before."""
    import openvino as ov

    model = vision_attn.create_model("vit_tiny_patch16_224", **VIT_KW).eval()
    fp32 = export_onnx(model, tmp_path / "m.onnx", (16, 16), dynamic_batch=True, exporter="torchscript").path
    assert onnx_float_tail(onnx.load(str(fp32)).graph, fixed_weights(model)) == []
    assert openvino_float_tail(ov.Core().read_model(str(fp32)), fixed_weights(model)) == []  # the head's bias added
