"""The 2026 families export: a DINOv3 ViT (rotary embedding, registers, layer scale) and EVA-02 (its
rotary embedding, SwiGLU) written to ONNX give PyTorch's logits in onnxruntime and in OpenVINO (the IR
converted from that file, f32 hint) within 1e-4, each built at two sizes (square and not; a learned
position table is resampled when the model is built, as timm's is, not in the graph)."""
from __future__ import annotations

import pytest
import torch

import vision_attn
from vision_attn.export.onnx import export_onnx, onnx_session, run_onnx

ov = pytest.importorskip("openvino")

SMALL = dict(depth=2, num_classes=7)
MODELS = {"vit_small_patch16_dinov3": dict(embed_dim=64, num_heads=2, **SMALL),
          "eva02_tiny_patch14_224": dict(SMALL)}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_exports_at_two_sizes_to_onnxruntime_and_openvino(tmp_path, name):
    patch = 16 if "patch16" in name else 14
    for h, w in ((4 * patch, 4 * patch), (3 * patch, 5 * patch)):  # built at the size, as timm exports a model
        torch.manual_seed(0)
        model = vision_attn.create_model(name, img_size=(h, w), **MODELS[name]).eval()
        path = tmp_path / f"{name}-{h}x{w}.onnx"
        export_onnx(model, path, (h, w), dynamic_batch=True, exporter="torchscript")
        x = torch.randn(2, 3, h, w)
        with torch.no_grad():
            ref = model(x)
        torch.testing.assert_close(run_onnx(onnx_session(path), x)[0], ref, atol=1e-4, rtol=1e-4)
        compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        out = torch.from_numpy(compiled(x.numpy())[compiled.outputs[0]].copy())
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
