"""kernels.freeze: a model readied for inference once (weights cast, linear weights kept in oneDNN's
layout) computes what the model computes, keeps its state dict, and follows weight changes."""
from __future__ import annotations

import copy

import pytest
import torch

import vision_attn
from vision_attn.export.runtimes import RuntimeModel
from vision_attn.kernels import FusedLinear, freeze, kernel_plan, onednn_works

needs_onednn = pytest.mark.skipif(not onednn_works(torch.float32), reason="oneDNN's matmul is not available here")

MODELS = {"vit_tiny_patch16_224": (32, {}), "swin_tiny_patch4_window7_224": (64, {"window_size": 4})}


def _packed(model: torch.nn.Module) -> list[FusedLinear]:
    return [m for m in model.modules() if isinstance(m, FusedLinear) and m._packed]


@needs_onednn
@pytest.mark.parametrize("name", MODELS)
def test_frozen_fp32_model_gives_the_models_outputs(name):
    size, kwargs = MODELS[name]
    torch.manual_seed(0)
    model = vision_attn.create_model(name, img_size=size, num_classes=7, **kwargs).eval()
    x = torch.randn(2, 3, size, size)
    with torch.no_grad(), kernel_plan("onednn"):
        ref = model(x)
        frozen = freeze(copy.deepcopy(model))
        out = frozen(x)
        assert _packed(frozen), "no linear layer kept a packed weight"
        again = frozen(x)  # the packed copies are reused
    assert (out - ref).abs().max() <= 1e-5 * ref.abs().max()
    assert torch.equal(out, again)
    assert frozen.state_dict().keys() == model.state_dict().keys()  # the copies are no buffers
    assert not any(p.requires_grad for p in frozen.parameters()) and not frozen.training


@needs_onednn
def test_a_changed_weight_is_packed_again():
    """load_state_dict writes in place (the version counter moves): the next call uses the new weights."""
    torch.manual_seed(0)
    model = freeze(vision_attn.create_model("vit_tiny_patch16_224", img_size=32, num_classes=5))
    other = vision_attn.create_model("vit_tiny_patch16_224", img_size=32, num_classes=5).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad(), kernel_plan("onednn"):
        model(x)
        model.load_state_dict(other.state_dict())
        assert (model(x) - other(x)).abs().max() <= 1e-5 * other(x).abs().max()


@needs_onednn
def test_a_frozen_layer_trains_through_its_weight():
    """In training the packed copy is not used: gradients reach the weight, and the step shows in the next
    inference."""
    torch.manual_seed(0)
    layer = FusedLinear(16, 8)
    layer.freeze()
    x = torch.randn(4, 16)
    with torch.no_grad(), kernel_plan("onednn"):
        before = layer(x)
    layer(x).sum().backward()
    assert layer.weight.grad is not None
    with torch.no_grad():
        layer.weight -= 0.1 * layer.weight.grad
    with torch.no_grad(), kernel_plan("onednn"):
        after = layer(x)
        expected = torch.nn.functional.linear(x, layer.weight, layer.bias)
    assert not torch.allclose(before, after) and torch.allclose(after, expected, atol=1e-5)


@needs_onednn
@pytest.mark.parametrize("name", MODELS)
def test_torch_frozen_runtime_in_bf16_is_close_to_float32(name):
    if not onednn_works(torch.bfloat16):
        pytest.skip("this CPU has no bf16 matmul in oneDNN")
    size, kwargs = MODELS[name]
    torch.manual_seed(0)
    model = vision_attn.create_model(name, img_size=size, num_classes=7, **kwargs).eval()
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        ref = model(x)
    with kernel_plan("onednn"):
        out = RuntimeModel(model, "torch-frozen", (size, size), precision="bf16")(x)
    assert out.dtype == torch.float32 and out.shape == ref.shape
    assert (out - ref).abs().max() <= 0.05 * ref.abs().max() + 0.05  # bfloat16 throughout: about 2-3 digits
    assert next(model.parameters()).dtype == torch.float32  # the runtime froze a copy
