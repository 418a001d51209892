"""torch.compile(fullgraph=True) and torch.export.export of ViT and Swin at 224 px and at a
non-square size: one graph, outputs equal to eager. Small widths and depths; the sizes are real.

The fast tests compile with the ``eager`` backend: Dynamo's capture is what ``fullgraph=True``
checks (a graph break raises), and the graph runs as captured. The inductor tests (code generation,
tens of seconds) are benchmarks."""
from __future__ import annotations

import pytest
import torch

import vision_attn

MODELS = {
    "vit": ("vit_small_patch16_224", dict(depth=2, embed_dim=48, num_heads=3)),
    "deit_distilled": ("deit_tiny_distilled_patch16_224", dict(depth=1, embed_dim=48, num_heads=3)),
    "swin": ("swin_tiny_patch4_window7_224", dict(depths=(2, 1, 1, 1), embed_dim=16, num_heads=(1, 1, 2, 2))),
    "swin_v2": ("swinv2_tiny_window8_256", dict(depths=(2, 1, 1, 1), embed_dim=16, num_heads=(1, 1, 2, 2))),
}
SIZES = [(224, 224), (160, 288)]


def _model(kind: str) -> torch.nn.Module:
    name, kwargs = MODELS[kind]
    return vision_attn.create_model(name, **kwargs).eval()


@pytest.mark.parametrize("kind", ["vit", "swin"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_compile_fullgraph_equals_eager(kind, size):
    model = _model(kind)
    x = torch.randn(2, 3, *size)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))


@pytest.mark.parametrize("kind, size", [(k, s) for k in ("vit", "swin") for s in SIZES]
                         + [("deit_distilled", SIZES[1]), ("swin_v2", SIZES[1])], ids=str)
def test_export_equals_eager(kind, size):
    model = _model(kind)
    x = torch.randn(2, 3, *size)
    program = torch.export.export(model, (x,))
    with torch.no_grad():
        torch.testing.assert_close(program.module()(x), model(x))


def test_features_only_compiles_and_exports():
    features = vision_attn.create_model(MODELS["swin"][0], **MODELS["swin"][1], features_only=True,
                                        output_fmt="NCHW").eval()
    x = torch.randn(1, 3, 224, 224)
    got = torch.export.export(features, (x,)).module()(x)
    torch._dynamo.reset()
    with torch.no_grad():
        want = features(x)
        compiled = torch.compile(features, fullgraph=True, backend="eager")(x)
    for a, b in zip(compiled, want):
        torch.testing.assert_close(a, b)
    assert [tuple(m.shape) for m in got] == [(1, 16 * 2**i, 56 // 2**i, 56 // 2**i) for i in range(4)]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@pytest.mark.benchmark
@pytest.mark.parametrize("kind", ["vit", "swin"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_compile_inductor_equals_eager(kind, size):
    model = _model(kind)
    x = torch.randn(2, 3, *size)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
