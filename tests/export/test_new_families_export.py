"""The 2026 families export: a DINOv3 ViT (rotary embedding, registers, layer scale), EVA-02 (its rotary
embedding, SwiGLU), ConvNeXt, Hiera (mask-unit attention, query pooling), SAM 2's Hiera encoder
(windowed blocks over a padded map, global blocks) and SigLIP 2's towers (the fixed-size one under
timm's SigLIP name; the NaFlex tower on images of one size, its 16x16 position table resampled with
antialiasing in the graph) written to ONNX give PyTorch's outputs in onnxruntime and in OpenVINO (the
IR converted from that file, f32 hint) within 1e-4, every weight drawn at random so that the outputs
are of order 1.

Each model is built at each of its sizes (square and not), as timm exports a model: Hiera's unrolled
token order and mask units fix its input size when it is built (any multiple of 32), and a learned
position table of the other ViTs is resampled when the model is built, not in the graph."""
from __future__ import annotations

import openvino as ov
import pytest
import torch

import vision_attn
from tests.models.peer_weights import randomise
from vision_attn.export.onnx import export_onnx, onnx_session, run_onnx

SMALL = dict(depth=2, num_classes=7)
TINY_HIERA = dict(embed_dim=8, num_heads=1, stages=(1, 1, 1, 1), num_classes=7)
TINY_VIT = dict(embed_dim=32, num_heads=2, **SMALL)
SQUARE_AND_NOT = ((64, 64), (32, 64))
# name: (create_model arguments, the two sizes, the exporter)
MODELS = {
    "vit_small_patch16_dinov3": (dict(embed_dim=64, num_heads=2, **SMALL), ((64, 64), (48, 80)), "torchscript"),
    "eva02_tiny_patch14_224": (dict(SMALL), ((56, 56), (42, 70)), "torchscript"),
    "convnext_atto": (dict(depths=(1, 1, 1, 1), dims=(8, 16, 24, 32), num_classes=7), SQUARE_AND_NOT, "torchscript"),
    "hiera_tiny_224": (TINY_HIERA, SQUARE_AND_NOT, "torchscript"),
    # block 2 global; block 3 pools the queries in a 14x14 window over a 4x4 (2x4) map, padded
    "sam2_hiera_tiny": (dict(TINY_HIERA, global_att_blocks=(2,)), SQUARE_AND_NOT, "torchscript"),
    "vit_base_patch16_siglip_224": (TINY_VIT, SQUARE_AND_NOT, "torchscript"),
    # a transformers siglip2 folder's tower on images of one size: its table resampled to the grid with
    # antialiasing in the graph (ONNX Resize, antialias=1), which only the dynamo exporter writes; one size
    # (non-square: 16x16 -> 2x4) and batch 1, as the dynamo export takes 3-10 s where the others take 0.3
    "naflexvit_base_patch16_siglip": (TINY_VIT, ((32, 64),), "dynamo"),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_built_at_two_sizes_exports_to_onnxruntime_and_openvino(tmp_path, name):
    kwargs, sizes, exporter = MODELS[name]
    for h, w in sizes:
        model = randomise(vision_attn.create_model(name, img_size=(h, w), **kwargs))
        path = tmp_path / f"{name}-{h}x{w}.onnx"
        batch = 2 if exporter == "torchscript" else 1
        export_onnx(model, path, (h, w), dynamic_batch=batch > 1, exporter=exporter)
        x = torch.randn(batch, 3, h, w, generator=torch.Generator().manual_seed(h + w))
        with torch.no_grad():
            ref = model(x)
        assert ref.shape == (batch, 7) and ref.abs().max() > 0.5  # weights drawn at random: logits of order 1
        torch.testing.assert_close(run_onnx(onnx_session(path), x)[0], ref, atol=1e-4, rtol=1e-4)
        compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        out = torch.from_numpy(compiled(x.numpy())[compiled.outputs[0]].copy())
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


def test_the_torchscript_exporter_names_what_it_cannot_write(tmp_path):
    """SigLIP 2's run-time resampling has no TorchScript-exporter form at any opset: the error says so and
    names the exporter that writes it, and leaves nothing behind."""
    model = vision_attn.create_model("naflexvit_base_patch16_siglip", img_size=32, **TINY_VIT)
    path = tmp_path / "siglip2.onnx"
    with pytest.raises(vision_attn.ConfigError) as info:
        export_onnx(model, path, (32, 32), exporter="torchscript")
    message = str(info.value)
    assert "\n" not in message and "_upsample_bilinear2d_aa" in message and "--exporter dynamo" in message
    assert list(tmp_path.iterdir()) == []
