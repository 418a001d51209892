"""ONNX export of Swin V2 runs in onnxruntime with the logits of PyTorch (max abs difference <= 1e-4):
swinv2_tiny_window8_256 at 256 and at 192x256 (padded windows), with a dynamic batch, through
:func:`vision_attn.export.onnx.export_onnx` with the TorchScript exporter (opset 17; torch.export's takes
minutes for the full model on this project's CPU, and is checked on Swin V1 in test_swin_onnx.py)."""
from __future__ import annotations

import pytest
import torch

import vision_attn
from vision_attn.kernels import accelerate
from vision_attn.export.onnx import export_onnx, onnx_session, run_onnx

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = accelerate(vision_attn.create_model("swinv2_tiny_window8_256")).eval()  # tables kept: not by the export
    with torch.no_grad():  # fresh post-norms are zero: give every block a say in the logits
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=0.02 if p.ndim > 1 else 0.1)
    return model


@pytest.mark.parametrize("size", [(256, 256), (192, 256)])
@pytest.mark.parametrize("exporter", ["torchscript"])
def test_swinv2_tiny_dynamic_batch(tmp_path, tiny, size, exporter):
    for stage in tiny.layers:  # a forward pass of an earlier test filled the caches
        stage.windows.clear()
    out = export_onnx(tiny, tmp_path / "swinv2.onnx", size, dynamic_batch=True, exporter=exporter, opset=17)
    assert out.dynamic_batch and out.path.is_file()
    # the masks, gather orders and coordinate tables were built inside the graph, not cached by the export
    assert all(len(stage.windows) == 0 for stage in tiny.layers)
    session = onnx_session(out.path)
    for batch in (1, 3):
        x = torch.randn(batch, 3, *size)
        with torch.no_grad():
            expected = tiny(x)
        got = run_onnx(session, x)[0]
        assert got.shape == (batch, 1000)
        assert (got - expected).abs().max().item() <= 1e-4
