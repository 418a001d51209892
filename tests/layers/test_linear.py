"""The oneDNN inference path of layers.linear: same numbers as F.linear, taken only where it is a drop-in."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import vision_attn
from vision_attn.layers import Mlp, linear, set_onednn_linear
from vision_attn.layers.linear import _onednn_works


class OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func._overloadpacket))
        return func(*args, **(kwargs or {}))


def ran_onednn(fn) -> bool:
    with OpLog() as log:
        fn()
    return "mkldnn._linear_pointwise" in log.ops


needs_onednn = pytest.mark.skipif(not _onednn_works(), reason="oneDNN's fused linear is not available here")


@needs_onednn
@pytest.mark.parametrize("act", [None, nn.GELU(), nn.GELU(approximate="tanh"), nn.ReLU()], ids=str)
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 5e-2)])
def test_fast_path_matches_f_linear(act, dtype, tol):
    layer = nn.Linear(64, 96).to(dtype)
    x = torch.randn(2, 7, 64, dtype=dtype)
    with torch.no_grad():
        assert ran_onednn(lambda: linear(x, layer, act))
        y = linear(x, layer, act)
        ref = F.linear(x, layer.weight, layer.bias)
        ref = act(ref) if act is not None else ref
    assert y.shape == ref.shape and y.dtype == dtype
    torch.testing.assert_close(y.float(), ref.float(), atol=tol, rtol=tol)


@needs_onednn
def test_standard_path_when_a_graph_is_recorded_or_off():
    layer, x = nn.Linear(8, 4), torch.randn(3, 8)
    assert not ran_onednn(lambda: linear(x, layer))  # the weight requires grad: autograd needs aten
    y = linear(x, layer)
    y.sum().backward()
    assert layer.weight.grad is not None
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert not ran_onednn(lambda: linear(x, layer))
    with torch.no_grad():
        assert not ran_onednn(lambda: linear(x.double(), nn.Linear(8, 4).double()))
        previous = set_onednn_linear(False)
        try:
            assert not ran_onednn(lambda: linear(x, layer))
        finally:
            set_onednn_linear(previous)
        assert ran_onednn(lambda: linear(x, layer))


def test_meta_tensors_and_fx_tracing_use_the_standard_path():
    with torch.device("meta"):
        layer = nn.Linear(8, 4)
        with torch.no_grad():
            assert linear(torch.zeros(2, 8), layer).shape == (2, 4)
    mlp = Mlp(8, 16)
    gm = torch.fx.symbolic_trace(mlp)
    assert "_linear_pointwise" not in gm.code
    x = torch.randn(2, 8)
    torch.testing.assert_close(gm(x), mlp(x))


@needs_onednn
def test_vit_inference_uses_onednn_and_matches_training_path():
    model = vision_attn.create_model("vit_tiny_patch16_224", depth=2, num_classes=7).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert ran_onednn(lambda: model(x))
        fast = model(x)
    standard = model(x)  # grad enabled, parameters require grad: aten path
    torch.testing.assert_close(fast, standard.detach(), atol=1e-5, rtol=1e-5)
