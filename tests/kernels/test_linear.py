"""The linear kernels of vision_attn.kernels (FusedLinear, fused_linear, linear_act) at inference and in
training: the same numbers as F.linear, taken only where they are a drop-in, the layers that are called
as modules, and the self-check that chooses the kernels of a measured plan (timed with a fake clock,
kept in the cache).

Most tests run under fixed plans built here (or the test process's "onednn" plan); the ones that run
the self-check say so and use their own temporary cache. A test that asserts that oneDNN ran is
skipped for a dtype oneDNN cannot run on this machine (bf16 on a CPU without bf16 instructions).
"""
from __future__ import annotations

import importlib
import json
import math

import pytest
import torch
import torch.autograd.forward_ad as forward_ad
import torch.nn.functional as F
from torch import nn

import vision_attn
from vision_attn.kernels import (
    accelerate,
    FusedLinear,
    KernelChoice,
    KernelPlan,
    LinearKernels,
    fused_linear,
    kernel_plan,
    linear_act,
    onednn_works,
    resolve_plan,
)
from vision_attn.kernels.cache import PLANS_FILE
from vision_attn.kernels.onednn import PRODUCTS
from vision_attn.kernels.timing import crossover
from vision_attn.layers import Mlp

from tests.ops import SMALL_MODELS, OpLog, ops_of, printed_with_fast_paths_off

measure = importlib.import_module("vision_attn.kernels.measure")
onednn = importlib.import_module("vision_attn.kernels.onednn")
plan_module = importlib.import_module("vision_attn.kernels.plan")

ONEDNN_OP = "mkldnn._linear_pointwise"
DTYPES = (torch.float32, torch.bfloat16)


def ran_onednn(fn) -> bool:
    return ONEDNN_OP in ops_of(fn)


def needs_onednn(dtype: torch.dtype):
    return pytest.mark.skipif(not onednn_works(dtype), reason=f"oneDNN's fused linear cannot run {dtype} here")


def fixed_plan(linear: LinearKernels, inference: str = "onednn") -> KernelPlan:
    """A new fixed plan (its own memo): ``linear`` in training and ``inference`` at inference for both
    dtypes, fused attention."""
    return KernelPlan("onednn", {dtype: KernelChoice(inference, linear, "fused") for dtype in DTYPES})


PLANS = {
    "onednn": lambda: fixed_plan(LinearKernels("onednn", "onednn", "onednn")),
    "aten": lambda: resolve_plan("aten"),
    "split": lambda: fixed_plan(LinearKernels("onednn", "onednn", "onednn",
                                              dict(forward=0, input_grad=10**12, weight_grad=0))),
}


@pytest.fixture(scope="module")
def measured_plan(tmp_path_factory) -> KernelPlan:
    """This machine's measured plan, every dtype resolved: runs the self-checks, in a temporary cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VISION_ATTN_CACHE", str(tmp_path_factory.mktemp("kernel-cache")))
        return KernelPlan("measured").resolved()


def grads_of(fn, *tensors, grad_out=None):
    y = fn()
    grad_out = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(y.dtype) if grad_out is None else grad_out
    return y, torch.autograd.grad(y, tensors, grad_out), grad_out


def call_of(layer: nn.Module, x: torch.Tensor, act: nn.Module | None):
    return (lambda: layer(x)) if act is None else (lambda: linear_act(layer, x, act))


# ------------------------------------------------------------------------------------------------
# inference
@pytest.mark.parametrize("act", [None, nn.GELU(), nn.GELU(approximate="tanh"), nn.ReLU()], ids=str)
@pytest.mark.parametrize("dtype,tol", [pytest.param(torch.float32, 2e-5, marks=needs_onednn(torch.float32), id="float32"),
                                       pytest.param(torch.bfloat16, 5e-2, marks=needs_onednn(torch.bfloat16), id="bfloat16")])
def test_fast_path_matches_f_linear(act, dtype, tol):
    layer = FusedLinear(64, 96).to(dtype)
    x = torch.randn(2, 7, 64, dtype=dtype)
    with torch.no_grad():
        assert ran_onednn(call_of(layer, x, act))
        y = call_of(layer, x, act)()
        ref = F.linear(x, layer.weight, layer.bias)
        ref = act(ref) if act is not None else ref
    assert y.shape == ref.shape and y.dtype == dtype
    torch.testing.assert_close(y.float(), ref.float(), atol=tol, rtol=tol)


@needs_onednn(torch.float32)
def test_standard_path_for_other_dtypes_or_under_the_aten_plan():
    layer, x = FusedLinear(8, 4), torch.randn(3, 8)
    with torch.no_grad():
        assert not ran_onednn(lambda: FusedLinear(8, 4).double()(x.double()))
        assert not ran_onednn(lambda: FusedLinear(8, 4).half()(x.half()))
        with pytest.raises(RuntimeError):  # mixed dtypes outside autocast: F.linear's own error
            layer(x.bfloat16())
        with kernel_plan("aten"):
            assert not ran_onednn(lambda: layer(x))
        assert ran_onednn(lambda: layer(x))


def test_fused_linear_is_f_linear_with_an_optional_gelu():
    x, w, b = torch.randn(4, 3, 8), torch.randn(5, 8), torch.randn(5)
    with torch.no_grad():
        for gelu in (None, "none", "tanh"):
            ref = F.linear(x, w, b) if gelu is None else F.gelu(F.linear(x, w, b), approximate=gelu)
            torch.testing.assert_close(fused_linear(x, w, b, gelu), ref, atol=2e-5, rtol=2e-5)
        torch.testing.assert_close(fused_linear(x, w), F.linear(x, w), atol=2e-5, rtol=2e-5)  # no bias
        assert fused_linear(torch.randn(8), w, b).shape == (5,)  # a 1-D input, as F.linear takes it
        assert fused_linear(torch.randn(0, 8), w, b).shape == (0, 5)


def test_fused_linear_keeps_nn_linear_parameters_keys_and_initialisation():
    torch.manual_seed(0)
    ours = FusedLinear(8, 4, bias=False)
    torch.manual_seed(0)
    ref = nn.Linear(8, 4, bias=False)
    assert isinstance(ours, nn.Linear) and ours.extra_repr() == ref.extra_repr()
    assert list(ours.state_dict()) == list(ref.state_dict()) and torch.equal(ours.weight, ref.weight)


def test_meta_tensors_and_fx_tracing():
    """Meta tensors: the standard ops. torch.fx: the layers' calls are leaf nodes that choose their
    kernels at run time; a function that calls fused_linear itself is traced into the standard ops."""
    with torch.device("meta"):
        layer = FusedLinear(8, 4)
        with torch.no_grad():
            assert layer(torch.zeros(2, 8)).shape == (2, 4)
    mlp = accelerate(Mlp(8, 16))
    gm = torch.fx.symbolic_trace(mlp)
    assert "fused_linear" in gm.code and "_linear_pointwise" not in gm.code
    x = torch.randn(2, 8)
    torch.testing.assert_close(gm(x), mlp(x))
    if onednn_works(torch.float32):
        with torch.no_grad():
            assert ran_onednn(lambda: gm(x))  # the leaf chooses as the eager layer does

    class Direct(nn.Module):  # calls fused_linear through its own name: fx does not wrap it
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return fused_linear(x, self.w, None, "tanh")

    direct = Direct()
    gm = torch.fx.symbolic_trace(direct)
    assert "fused_linear" not in gm.code and "linear" in gm.code and "gelu" in gm.code
    torch.testing.assert_close(gm(x), direct(x))


@needs_onednn(torch.float32)
def test_vit_inference_uses_onednn_and_matches_training_path_and_the_standard_kernels():
    model = accelerate(vision_attn.create_model("vit_tiny_patch16_224", depth=2, num_classes=7)).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert ran_onednn(lambda: model(x))
        fast = model(x)
    training = model(x)  # grad enabled, parameters require grad: the training path
    with kernel_plan("aten"), torch.no_grad():
        standard = model(x)
    torch.testing.assert_close(fast, training.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast, standard, atol=1e-5, rtol=1e-5)


def test_inference_non_contiguous_operands_through_fused_linear():
    x = torch.randn(6, 19, 4).transpose(0, 2)  # (4, 19, 6): a strided view
    weight, bias = torch.randn(6, 17).t(), torch.randn(17)  # (17, 6), not contiguous
    assert not x.is_contiguous() and not weight.is_contiguous()
    with torch.no_grad():
        torch.testing.assert_close(fused_linear(x, weight, bias, "none"), F.gelu(F.linear(x, weight, bias)),
                                   atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# linear_act: fused only for a plain FusedLinear and nn.GELU
@needs_onednn(torch.float32)
def test_linear_act_fuses_a_plain_layer_and_its_gelu():
    mlp, x = accelerate(Mlp(8, 16)), torch.randn(3, 8)
    with torch.no_grad():
        ops = ops_of(lambda: mlp(x))
    assert ops.count(ONEDNN_OP) == 2 and "aten.gelu" not in ops  # fc1 with its GELU, then fc2


def test_linear_act_calls_a_hooked_layer_or_activation_as_a_module():
    mlp, x = accelerate(Mlp(8, 16)), torch.randn(3, 8)
    with torch.no_grad():
        ref = mlp(x)
    seen = []
    for module in (mlp.fc1, mlp.act):
        handle = module.register_forward_hook(lambda m, args, out: seen.append((type(m).__name__, out.shape)))
        try:
            with torch.no_grad():
                out = mlp(x)
        finally:
            handle.remove()
        torch.testing.assert_close(out, ref, atol=2e-5, rtol=2e-5)
    assert seen == [("FusedLinear", (3, 16)), ("GELU", (3, 16))]
    # a pre-hook that changes the input, and a global hook, are respected
    handle = mlp.fc1.register_forward_pre_hook(lambda m, args: (2 * args[0],))
    try:
        with torch.no_grad():
            doubled = mlp(x)
    finally:
        handle.remove()
    with torch.no_grad():
        torch.testing.assert_close(doubled, mlp.fc2(F.gelu(mlp.fc1(2 * x))), atol=2e-5, rtol=2e-5)
    fired = []
    handle = nn.modules.module.register_module_forward_hook(
        lambda m, args, out: fired.append(type(m).__name__) if m is mlp.fc1 else None)
    try:
        with torch.no_grad():
            mlp(x)
    finally:
        handle.remove()
    assert fired == ["FusedLinear"]


def test_linear_act_respects_a_subclass_forward_and_other_layers():
    class Doubled(FusedLinear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 2 * super().forward(x)

    class Gelu2(nn.GELU):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) + 1

    x = torch.randn(3, 8)
    layer = Doubled(8, 16)
    plain = nn.Linear(8, 16)  # a swapped-in layer of another type (a quantized or adapter-wrapped one)
    with torch.no_grad():
        torch.testing.assert_close(linear_act(layer, x, nn.GELU()), F.gelu(2 * F.linear(x, layer.weight, layer.bias)),
                                   atol=2e-5, rtol=2e-5)
        torch.testing.assert_close(linear_act(plain, x, nn.GELU()), F.gelu(plain(x)), atol=2e-5, rtol=2e-5)
        fused = FusedLinear(8, 16)
        torch.testing.assert_close(linear_act(fused, x, Gelu2()), F.gelu(F.linear(x, fused.weight, fused.bias)) + 1,
                                   atol=2e-5, rtol=2e-5)
        torch.testing.assert_close(linear_act(fused, x, nn.ReLU()), F.relu(F.linear(x, fused.weight, fused.bias)),
                                   atol=2e-5, rtol=2e-5)


# ------------------------------------------------------------------------------------------------
# the training path
@pytest.mark.parametrize("plan_name", ["onednn", "aten", "split", "measured"])
@pytest.mark.parametrize("act", [None, nn.GELU(), nn.GELU(approximate="tanh")], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,features,out", [((1, 64), 64, 96), ((2, 5, 37), 37, 21), ((1, 3, 4, 24), 24, 40),
                                                ((1, 256, 384), 384, 1536)])  # the self-check's size: above any crossover
def test_training_path_gradients_equal_f_linear(request, plan_name, act, dtype, shape, features, out):
    """Every plan (the measured one: this machine's self-check, in a temporary cache); oneDNN runs
    where the plan's choice for the dtype, as it runs here, names it (ATen where oneDNN cannot run it)."""
    plan = request.getfixturevalue("measured_plan") if plan_name == "measured" else PLANS[plan_name]()
    torch.manual_seed(0)
    layer = FusedLinear(features, out).to(dtype)
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    params = (x, layer.weight, layer.bias)
    with kernel_plan(plan), OpLog() as log:
        y, grads, g = grads_of(call_of(layer, x, act), *params)
    assert (ONEDNN_OP in log.ops) == plan.choice(dtype).linear.any_onednn(x.numel() * out)
    ref_y, ref_grads, _ = grads_of(lambda: (act or nn.Identity())(F.linear(x, layer.weight, layer.bias)), *params,
                                   grad_out=g)

    def tol(ref):  # fp32: the same products summed in another order (relative to the largest entry); bf16: one rounding
        return dict(atol=1e-5 * max(1.0, ref.abs().max().item()), rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=1e-2)

    assert y.dtype == dtype
    torch.testing.assert_close(y, ref_y, **tol(ref_y))
    for got, ref in zip(grads, ref_grads):
        assert got.dtype == ref.dtype and got.shape == ref.shape
        torch.testing.assert_close(got, ref, **tol(ref))


@pytest.mark.parametrize("plan_name", ["onednn", "aten"])
def test_training_path_non_contiguous_input_and_weight(plan_name):
    torch.manual_seed(0)
    base = torch.randn(6, 19, 4, requires_grad=True)
    x = base.transpose(0, 2)  # (4, 19, 6): a strided view
    w_base = torch.randn(6, 17, requires_grad=True)
    weight, bias = w_base.t(), torch.randn(17, requires_grad=True)  # (17, 6), not contiguous
    assert not x.is_contiguous() and not weight.is_contiguous()
    with kernel_plan(PLANS[plan_name]()), OpLog() as log:
        y, grads, g = grads_of(lambda: fused_linear(x, weight, bias, "none"), base, w_base, bias)
    assert (ONEDNN_OP in log.ops) == (plan_name == "onednn" and onednn_works(torch.float32))
    ref_y, ref_grads, _ = grads_of(lambda: F.gelu(F.linear(x, weight, bias)), base, w_base, bias, grad_out=g)
    torch.testing.assert_close(y, ref_y, atol=1e-5, rtol=1e-5)
    for got, ref in zip(grads, ref_grads):
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("plan_name", ["onednn", "aten"])
def test_training_path_under_bf16_autocast_matches_f_linear(plan_name):
    """Lightning's bf16-mixed on the CPU: fp32 weights, bf16 products, fp32 gradients for the weights;
    the bf16 choice of the plan (ATen where oneDNN cannot run bf16 here)."""
    plan = PLANS[plan_name]()
    torch.manual_seed(0)
    layer, x = FusedLinear(48, 80), torch.randn(3, 7, 48, requires_grad=True)
    params = (x, layer.weight, layer.bias)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with kernel_plan(plan), OpLog() as log:
            y, grads, g = grads_of(lambda: linear_act(layer, x, nn.GELU()), *params)
        ref_y, ref_grads, _ = grads_of(lambda: F.gelu(F.linear(x, layer.weight, layer.bias)), *params, grad_out=g)
    assert (ONEDNN_OP in log.ops) == plan.choice(torch.bfloat16).linear.any_onednn(x.numel() * 80)
    assert y.dtype == ref_y.dtype == torch.bfloat16
    torch.testing.assert_close(y, ref_y, atol=2e-2, rtol=1e-2)
    for got, ref in zip(grads, ref_grads):
        assert got.dtype == ref.dtype == torch.float32
        torch.testing.assert_close(got, ref, atol=2e-2, rtol=1e-2)


@needs_onednn(torch.bfloat16)
def test_inference_under_bf16_autocast_is_fused_too():
    layer, x = FusedLinear(48, 80), torch.randn(3, 7, 48)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert ran_onednn(lambda: linear_act(layer, x, nn.GELU()))
        out = linear_act(layer, x, nn.GELU())
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out, F.gelu(F.linear(x, layer.weight, layer.bias)), atol=2e-2, rtol=1e-2)


def test_second_derivatives_through_the_standard_ops():
    torch.manual_seed(0)
    layer, x = FusedLinear(8, 5), torch.randn(4, 8, requires_grad=True)

    def penalty(fn):
        y = fn()
        (gx,) = torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)
        return type(y.grad_fn).__name__, torch.autograd.grad(gx.pow(2).sum(), (x, layer.weight, layer.bias))

    with kernel_plan(PLANS["onednn"]()):
        node, ours = penalty(lambda: linear_act(layer, x, nn.GELU()))
    if onednn_works(torch.float32):
        assert node == "_LinearBackward"  # the oneDNN training path, differentiated twice
    _, ref = penalty(lambda: F.gelu(F.linear(x, layer.weight, layer.bias)))
    for got, want in zip(ours, ref):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@needs_onednn(torch.float32)
def test_training_path_off_where_it_does_not_apply():
    layer, x = FusedLinear(8, 4), torch.randn(3, 8, requires_grad=True)
    with kernel_plan(PLANS["onednn"]()):
        assert ran_onednn(lambda: layer(x).sum().backward())
        with kernel_plan("aten"):
            assert not ran_onednn(lambda: layer(x).sum().backward())
        with torch.autocast("cpu", dtype=torch.float16):  # only bf16 autocast is mapped onto the kernels
            assert not ran_onednn(lambda: layer(x))
        # torch.func transforms and forward-mode AD: the standard ops, same numbers
        grad = torch.func.grad(lambda t: linear_act(layer, t, nn.GELU()).sum())
        assert not ran_onednn(lambda: grad(x.detach()))
        ref = torch.func.grad(lambda t: F.gelu(F.linear(t, layer.weight, layer.bias)).sum())(x.detach())
        torch.testing.assert_close(grad(x.detach()), ref)
        with forward_ad.dual_level():
            dual = forward_ad.make_dual(x.detach(), torch.ones(3, 8))
            tangent = forward_ad.unpack_dual(layer(dual)).tangent
        torch.testing.assert_close(tangent, layer.weight.detach().sum(1).expand(3, 4))
        traced = torch.jit.trace(Mlp(8, 16), torch.randn(2, 8), check_trace=False)
        assert "_linear_pointwise" not in str(traced.inlined_graph)


def test_forward_ad_and_torch_func_through_a_frozen_layer():
    """Parameters that need no gradient (inference kernels otherwise): a dual input keeps its tangent,
    and torch.func.jvp and vmap give F.linear's numbers."""
    layer = FusedLinear(8, 4).requires_grad_(False)
    x, t = torch.randn(3, 8), torch.randn(3, 8)
    with forward_ad.dual_level():
        tangent = forward_ad.unpack_dual(layer(forward_ad.make_dual(x, t))).tangent
    assert tangent is not None
    torch.testing.assert_close(tangent, F.linear(t, layer.weight), atol=1e-5, rtol=1e-5)
    _, jvp = torch.func.jvp(lambda u: linear_act(layer, u, nn.GELU()), (x,), (t,))
    _, ref = torch.func.jvp(lambda u: F.gelu(F.linear(u, layer.weight, layer.bias)), (x,), (t,))
    torch.testing.assert_close(jvp, ref, atol=1e-5, rtol=1e-5)
    batched = torch.func.vmap(layer)(torch.stack([x, t]))
    torch.testing.assert_close(batched, F.linear(torch.stack([x, t]), layer.weight, layer.bias), atol=1e-5, rtol=1e-5)


def test_an_empty_batch_trains_through_the_standard_ops():
    layer, x = FusedLinear(8, 4), torch.randn(0, 8, requires_grad=True)
    with kernel_plan(PLANS["onednn"]()), OpLog() as log:  # oneDNN at every size, but no multiply-adds
        gx, gw, gb = torch.autograd.grad(linear_act(layer, x, nn.GELU()).sum(), (x, layer.weight, layer.bias))
    assert ONEDNN_OP not in log.ops
    assert gx.shape == (0, 8) and not gw.any() and not gb.any()


def test_switch_from_the_environment():
    code = ("import torch; from vision_attn.kernels import current_plan; p = current_plan();"
            "print(p.name, p.fast_paths, p.choice(torch.float32).inference, p.choice(torch.bfloat16).linear.forward)")
    assert printed_with_fast_paths_off(code) == ["aten", "False", "aten", "aten"]


# ------------------------------------------------------------------------------------------------
# the self-check that chooses the kernels (measure_linear with a fake clock: no plan, no cache)
@needs_onednn(torch.float32)
def test_self_check_chooses_the_faster_kernel_and_never_a_wrong_one(monkeypatch):
    now = [0.0]  # a clock that only the kernels below advance: the timing is exact

    def costs(fn, seconds):
        def run(*args):
            now[0] += seconds
            return fn(*args)
        return run

    slow = {("forward", "aten"), ("input_grad", "aten"), ("weight_grad", "onednn")}
    kernels = {p: {k: costs(fn, 1.0 if (p, k) in slow else 0.1) for k, fn in ks.items()} for p, ks in PRODUCTS.items()}
    kernels["forward"]["onednn"] = lambda x, w, b: F.linear(x, w, b) + 1  # faster but wrong: never chosen
    monkeypatch.setattr(measure, "PRODUCTS", kernels)
    result = measure.measure_linear(torch.float32, shape=(16, 24, 40), rounds=3, clock=lambda: now[0])
    assert (result["forward"], result["input_grad"], result["weight_grad"]) == ("aten", "onednn", "aten")
    large = result["seconds"]["large"]
    assert "forward" not in large  # not timed: it disagreed
    assert large["input_grad"] == pytest.approx({"aten": 1.0, "onednn": 0.1})
    assert large["weight_grad"] == pytest.approx({"aten": 0.1, "onednn": 1.0})
    assert result["seconds"]["small"] == {"input_grad": pytest.approx({"aten": 1.0, "onednn": 0.1})}
    assert result["onednn_from"] == {"input_grad": 0}  # oneDNN also won the small size: every size
    json.dumps(result)  # what the cache keeps


def test_crossover_is_where_the_fitted_lines_meet():
    # ATen 1 s at 1 multiply-add and 10 s at 101; oneDNN 2 and 5: the lines 1 + 0.09 m and 2 + 0.03 m
    # (m from 1) meet at 1 + 1/0.06 = 17.7
    assert crossover({"aten": 1.0, "onednn": 2.0}, {"aten": 10.0, "onednn": 5.0}, 1, 101) == 18
    assert crossover({"aten": 2.0, "onednn": 1.0}, {"aten": 10.0, "onednn": 5.0}, 1, 101) == 0  # oneDNN wins both
    for large in ({"aten": 5.0, "onednn": 5.0}, {"aten": 4.0, "onednn": 5.0}):  # a tie or ATen at the large size
        with pytest.raises(ValueError, match="no size from which"):
            crossover({"aten": 1.0, "onednn": 1.0}, large, 1, 101)


@needs_onednn(torch.float32)
def test_self_check_measures_the_size_from_which_onednn_wins(monkeypatch):
    now = [0.0]  # each kernel advances this clock by a fixed cost plus a cost per multiply-add

    def costs(fn, fixed, per_mac):
        def run(a, b, *rest):
            out = fn(a, b, *rest)
            macs = math.isqrt(a.numel() * b.numel() * out.numel())  # (M*K*N)^2 for all three products
            now[0] += fixed + per_mac * macs
            return out
        return run

    kernels = {p: {"aten": costs(ks["aten"], 1.0, 0.002), "onednn": costs(ks["onednn"], 3.0, 0.001)}
               for p, ks in PRODUCTS.items()}
    monkeypatch.setattr(measure, "PRODUCTS", kernels)
    result = measure.measure_linear(torch.float32, shape=(16, 24, 40), rounds=3, clock=lambda: now[0],
                                    small_shape=(4, 8, 16))
    assert (result["forward"], result["input_grad"], result["weight_grad"]) == ("onednn", "onednn", "onednn")
    assert result["seconds"]["small"]["forward"] == pytest.approx({"aten": 1.0 + 0.002 * 512, "onednn": 3.0 + 0.001 * 512})
    linear = KernelChoice.from_dict({**result, "inference": "onednn", "attention": "fused"}).linear
    for product in PRODUCTS:  # 1 + 0.002 m = 3 + 0.001 m at m = 2000
        assert result["onednn_from"][product] in (2000, 2001)
        assert not linear.uses_onednn(product, 1999) and linear.uses_onednn(product, 2001)


@needs_onednn(torch.float32)
def test_layers_below_the_crossover_train_through_the_standard_ops():
    plan = fixed_plan(LinearKernels("onednn", "onednn", "onednn", dict(forward=1000, input_grad=4000, weight_grad=4000)))
    torch.manual_seed(0)
    layer = FusedLinear(10, 30)
    small, medium = torch.randn(3, 10, requires_grad=True), torch.randn(5, 10, requires_grad=True)
    with kernel_plan(plan):
        with OpLog() as log:  # 900 multiply-adds: below every product's crossover
            y = linear_act(layer, small, nn.GELU())
        assert ONEDNN_OP not in log.ops and "_Linear" not in type(y.grad_fn).__name__
        with OpLog() as fwd:  # 1500: the forward above its crossover, the gradients below theirs
            y = linear_act(layer, medium, nn.GELU())
        with OpLog() as bwd:
            grads = torch.autograd.grad(y.sum(), (medium, layer.weight))
    assert ONEDNN_OP in fwd.ops and ONEDNN_OP not in bwd.ops
    ref = torch.autograd.grad(F.gelu(F.linear(medium, layer.weight, layer.bias)).sum(), (medium, layer.weight))
    for got, want in zip(grads, ref):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@needs_onednn(torch.float32)
def test_self_checks_first_run_under_bf16_autocast_still_measure_the_kernels_themselves():
    """The self-checks themselves (onednn_works and measure_linear; no plan, no cache): a model's first
    call is often under autocast (a bf16 benchmark, bf16-mixed training), and the checks must not
    compare a bf16 F.linear with oneDNN's fp32 result and turn the fast path off for good."""
    onednn.onednn_works.cache_clear()
    try:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            works = {dtype: onednn_works(dtype) for dtype in DTYPES}
            result = measure.measure_linear(torch.float32, shape=(16, 24, 40), rounds=1)
    finally:
        onednn.onednn_works.cache_clear()
    assert works == {dtype: onednn_works(dtype) for dtype in DTYPES} and works[torch.float32]
    assert all(set(result["seconds"]["large"][p]) == {"aten", "onednn"} for p in PRODUCTS)  # every pair agreed


@needs_onednn(torch.bfloat16)
def test_a_measured_plan_first_used_under_bf16_autocast_runs_onednn(monkeypatch, tmp_path):
    """Runs the self-checks (a measured plan, in a temporary cache) from inside autocast and inference mode."""
    monkeypatch.setenv("VISION_ATTN_CACHE", str(tmp_path))
    fc, x, out = FusedLinear(24, 40), torch.randn(3, 24), []

    def call() -> None:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            out.append(fc(x))

    with kernel_plan(KernelPlan("measured")):
        assert ran_onednn(call)
    assert out[0].dtype == torch.bfloat16


def test_a_measured_plan_measures_once_per_dtype_and_thread_count(monkeypatch, tmp_path):
    """A measured plan's memo (the self-check replaced by a counter; a temporary cache all the same)."""
    monkeypatch.setenv("VISION_ATTN_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(plan_module, "_measure", lambda dtype, threads: calls.append((dtype, threads)) or KernelChoice())
    plan, threads = KernelPlan("measured"), torch.get_num_threads()
    assert plan.choice(torch.float32) is plan.choice(torch.float32)
    plan.choice(torch.bfloat16)
    assert plan.choice(torch.float64) == KernelChoice()  # other dtypes: ATen's, nothing measured
    assert calls == [(torch.float32, threads), (torch.bfloat16, threads)]
    other = 1 if threads != 1 else 2
    torch.set_num_threads(other)
    try:
        plan.choice(torch.float32)
    finally:
        torch.set_num_threads(threads)
    assert calls[-1] == (torch.float32, other) and len(calls) == 3


@needs_onednn(torch.float32)
def test_the_choice_is_kept_in_the_cache_so_later_runs_make_the_same(monkeypatch, tmp_path):
    """Runs the self-checks of a measured plan in a temporary cache, then reads and damages that cache."""
    monkeypatch.setenv("VISION_ATTN_CACHE", str(tmp_path))
    choice = KernelPlan("measured").choice(torch.float32)
    assert choice.inference == "onednn"
    assert all(getattr(choice.linear, p) in ("onednn", "aten") for p in PRODUCTS)
    assert set(choice.seconds) == {"linear", "attention"}
    stored = json.loads((tmp_path / PLANS_FILE).read_text())
    (key,) = [k for k in stored if k.startswith("linear; ")]
    assert "float32" in key and f"{torch.get_num_threads()} threads" in key and torch.__version__ in key
    assert {p: stored[key][p] for p in PRODUCTS} == {p: getattr(choice.linear, p) for p in PRODUCTS}
    assert stored[key]["onednn_from"] == dict(choice.linear.onednn_from)

    def no_measuring(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(plan_module, "measure_linear", no_measuring)
    monkeypatch.setattr(plan_module, "measure_attention", no_measuring)
    assert KernelPlan("measured").choice(torch.float32) == choice  # a new process: reads the file, measures nothing

    entry = stored[key]
    assert plan_module._valid_linear(entry)
    damages = ({"forward": "mkl"}, {"forward": ["onednn"]}, {"onednn_from": {"forward": -1}},
               {"onednn_from": {"fwd": 0}}, {"onednn_from": [["forward", 0]]}, {"onednn_from": {"forward": 1.5}},
               {"forward": "onednn", "onednn_from": {}})  # oneDNN chosen without its crossover
    for damage in damages:
        assert not plan_module._valid_linear({**entry, **damage}), damage
    assert not plan_module._valid_linear(None) and not plan_module._valid_linear(["forward"])
    stored[key] = {**entry, "forward": "onednn", "onednn_from": {}}  # damaged: measured again
    (tmp_path / PLANS_FILE).write_text(json.dumps(stored))
    all_aten = {**{p: "aten" for p in PRODUCTS}, "onednn_from": {}, "seconds": {"large": {}, "small": {}}}
    monkeypatch.setattr(plan_module, "measure_linear", lambda dtype, clock: all_aten)
    assert KernelPlan("measured").choice(torch.float32).linear == LinearKernels()
    assert json.loads((tmp_path / PLANS_FILE).read_text())[key] == all_aten
    (tmp_path / PLANS_FILE).write_text("{not json")  # an unreadable file: measured again, and rewritten
    monkeypatch.setattr(plan_module, "measure_attention", lambda dtype, clock: {"kernel": "fused", "seconds": {}})
    assert KernelPlan("measured").choice(torch.float32).attention == "fused"
    assert set(json.loads((tmp_path / PLANS_FILE).read_text())) == {key, key.replace("linear; ", "attention; ", 1)}


@needs_onednn(torch.float32)
@pytest.mark.parametrize("name,kwargs,size", SMALL_MODELS)
def test_model_training_step_gradients_equal_the_standard_path(name, kwargs, size):
    torch.manual_seed(0)
    model = accelerate(vision_attn.create_model(name, img_size=size, **kwargs)).eval()  # no dropout: the same function twice
    x = torch.randn(2, 3, size, size)

    def grads(plan):
        model.zero_grad()
        with kernel_plan(plan), OpLog() as log:
            model(x).logsumexp(-1).sum().backward()
        return ONEDNN_OP in log.ops, {k: p.grad.clone() for k, p in model.named_parameters()}

    fast, ours = grads("onednn")
    standard, ref = grads("aten")
    assert fast and not standard
    for k in ref:
        torch.testing.assert_close(ours[k], ref[k], atol=1e-5, rtol=1e-4, msg=k)
