"""Deployment: ONNX export with an onnxruntime parity check, and dynamic INT8 quantization."""
from vision_attn.export.onnx import DEFAULT_OPSET, OnnxExport, export_onnx, graph_ops, onnx_session, run_onnx
from vision_attn.export.source import Deployable, load_deployable

__all__ = ["DEFAULT_OPSET", "OnnxExport", "export_onnx", "graph_ops", "onnx_session", "run_onnx", "Deployable",
           "load_deployable"]
