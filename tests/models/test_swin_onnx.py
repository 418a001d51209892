"""ONNX export of Swin runs in onnxruntime with the logits of PyTorch (max abs difference <= 1e-4):
a narrow swin_tiny (two blocks a stage: plain and shifted windows everywhere) at 224 and at a non-square
size that needs padding (192x256) with the TorchScript exporter (opset 17), and a narrow swin_t (torchvision's rule) at 192x256 through the torch.export-based
exporter, torch's default (it needs onnxscript)."""
from __future__ import annotations

import warnings

import pytest
import torch

import vision_attn
from vision_attn.kernels import accelerate

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


def run_onnx(path, x: torch.Tensor) -> torch.Tensor:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])


@pytest.mark.parametrize("size", [(224, 224), (192, 256)])
def test_torchscript_exporter(tmp_path, size):
    model = vision_attn.create_model("swin_tiny_patch4_window7_224", depths=(2, 2, 2, 2), embed_dim=32,
                                     num_heads=(1, 2, 4, 8)).eval()
    accelerate(model)  # the fast path keeps its tables: the export must not fill them
    x = torch.randn(1, 3, *size)
    path = tmp_path / "swin.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter announces its deprecation
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17,
                          input_names=["images"], output_names=["logits"])
    # the masks and gather orders were built inside the graph, not cached during the export
    assert all(len(stage.windows) == 0 for stage in model.layers)
    with torch.no_grad():
        expected = model(x)
    out = run_onnx(path, x)
    assert out.shape == (1, 1000)
    assert (out - expected).abs().max().item() <= 1e-4


@pytest.mark.parametrize("name", ["swin_t"])
def test_torch_export_exporter(tmp_path, name):
    """torchvision's rule (pad, then roll) through the default exporter, on a narrow model."""
    pytest.importorskip("onnxscript")
    model = vision_attn.create_model(name, depths=(1, 1, 2, 1), embed_dim=32, num_heads=(1, 2, 4, 8)).eval()
    x = torch.randn(1, 3, 192, 256)
    path = tmp_path / "swin_small.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=True, verbose=False)
    with torch.no_grad():
        expected = model(x)
    assert (run_onnx(path, x) - expected).abs().max().item() <= 1e-4
