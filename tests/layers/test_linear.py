"""The oneDNN paths of layers.linear (inference and training): same numbers as F.linear, taken only where they are a drop-in."""
import importlib
import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import vision_attn
from vision_attn.layers import Mlp, linear, set_onednn_linear
from vision_attn.layers.linear import KernelPlan, _onednn_works, crossover, measure_kernels, training_kernels
from vision_attn.layers.window_attention import _Affine

from tests.ops import OpLog, printed_with_fast_paths_off

linear_module = importlib.import_module("vision_attn.layers.linear")  # the package exports the function `linear`


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
def test_standard_path_for_other_dtypes_or_when_off():
    layer, x = nn.Linear(8, 4), torch.randn(3, 8)
    with torch.no_grad():
        assert not ran_onednn(lambda: linear(x.double(), nn.Linear(8, 4).double()))
        with pytest.raises(RuntimeError):  # mixed dtypes outside autocast: F.linear's own error
            linear(x.bfloat16(), layer)
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


# ------------------------------------------------------------------------------------------------
# the training path
ALL_ONEDNN = KernelPlan("onednn", "onednn", "onednn", {})
ALL_ATEN = KernelPlan("aten", "aten", "aten", {})
SPLIT = KernelPlan("onednn", "onednn", "onednn", {}, onednn_from=dict(forward=0, input_grad=10**12, weight_grad=0))


def uses_onednn(plan: KernelPlan, macs: int) -> bool:
    return plan.any_onednn(macs)


def grads_of(fn, *tensors, grad_out=None):
    y = fn()
    grad_out = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(y.dtype) if grad_out is None else grad_out
    return y, torch.autograd.grad(y, tensors, grad_out), grad_out


@needs_onednn
@pytest.mark.parametrize("plan", [ALL_ONEDNN, ALL_ATEN, SPLIT, None], ids=["onednn", "aten", "split", "measured"])
@pytest.mark.parametrize("act", [None, nn.GELU(), nn.GELU(approximate="tanh")], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape,features,out", [((1, 64), 64, 96), ((2, 5, 37), 37, 21), ((1, 3, 4, 24), 24, 40),
                                                ((1, 256, 384), 384, 1536)])  # the self-check's size: above any crossover
def test_training_path_gradients_equal_f_linear(monkeypatch, plan, act, dtype, shape, features, out):
    if plan is not None:
        monkeypatch.setattr(linear_module, "training_kernels", lambda dtype: plan)
    torch.manual_seed(0)
    layer = nn.Linear(features, out).to(dtype)
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    params = (x, layer.weight, layer.bias)
    with OpLog() as log:
        y, grads, g = grads_of(lambda: linear(x, layer, act), *params)
    used = plan if plan is not None else training_kernels(dtype)  # measured: whatever this machine chose
    assert ("mkldnn._linear_pointwise" in log.ops) == uses_onednn(used, x.numel() * out)
    ref_y, ref_grads, _ = grads_of(lambda: (act or nn.Identity())(F.linear(x, layer.weight, layer.bias)), *params,
                                   grad_out=g)
    def tol(ref):  # fp32: the same products summed in another order (relative to the largest entry); bf16: one rounding
        return dict(atol=1e-5 * max(1.0, ref.abs().max().item()), rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=1e-2)

    assert y.dtype == dtype
    torch.testing.assert_close(y, ref_y, **tol(ref_y))
    for got, ref in zip(grads, ref_grads):
        assert got.dtype == ref.dtype and got.shape == ref.shape
        torch.testing.assert_close(got, ref, **tol(ref))


@needs_onednn
@pytest.mark.parametrize("plan", [ALL_ONEDNN, ALL_ATEN], ids=["onednn", "aten"])
def test_training_path_non_contiguous_input_and_weight(monkeypatch, plan):
    monkeypatch.setattr(linear_module, "training_kernels", lambda dtype: plan)
    torch.manual_seed(0)
    base = torch.randn(6, 19, 4, requires_grad=True)
    x = base.transpose(0, 2)  # (4, 19, 6): a strided view
    w_base = torch.randn(6, 17, requires_grad=True)
    weight, bias = w_base.t(), torch.randn(17, requires_grad=True)  # (17, 6), not contiguous
    layer = _Affine(weight, bias)
    assert not x.is_contiguous() and not weight.is_contiguous()
    y, grads, g = grads_of(lambda: linear(x, layer, nn.GELU()), base, w_base, bias)
    ref_y, ref_grads, _ = grads_of(lambda: F.gelu(F.linear(x, weight, bias)), base, w_base, bias, grad_out=g)
    torch.testing.assert_close(y, ref_y, atol=1e-5, rtol=1e-5)
    for got, ref in zip(grads, ref_grads):
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


@needs_onednn
@pytest.mark.parametrize("plan", [ALL_ONEDNN, ALL_ATEN], ids=["onednn", "aten"])
def test_training_path_under_bf16_autocast_matches_f_linear(monkeypatch, plan):
    """Lightning's bf16-mixed on the CPU: fp32 weights, bf16 products, fp32 gradients for the weights."""
    monkeypatch.setattr(linear_module, "training_kernels", lambda dtype: plan)
    torch.manual_seed(0)
    layer, x = nn.Linear(48, 80), torch.randn(3, 7, 48, requires_grad=True)
    params = (x, layer.weight, layer.bias)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with OpLog() as log:
            y, grads, g = grads_of(lambda: linear(x, layer, nn.GELU()), *params)
        ref_y, ref_grads, _ = grads_of(lambda: F.gelu(F.linear(x, layer.weight, layer.bias)), *params, grad_out=g)
    assert ("mkldnn._linear_pointwise" in log.ops) == uses_onednn(plan, x.numel() * 80)
    assert y.dtype == ref_y.dtype == torch.bfloat16
    torch.testing.assert_close(y, ref_y, atol=2e-2, rtol=1e-2)
    for got, ref in zip(grads, ref_grads):
        assert got.dtype == ref.dtype == torch.float32
        torch.testing.assert_close(got, ref, atol=2e-2, rtol=1e-2)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):  # inference under autocast: fused too
        assert ran_onednn(lambda: linear(x, layer, nn.GELU()))
        torch.testing.assert_close(linear(x, layer, nn.GELU()), F.gelu(F.linear(x, layer.weight, layer.bias)),
                                   atol=2e-2, rtol=1e-2)


@needs_onednn
def test_second_derivatives_through_the_standard_ops():
    torch.manual_seed(0)
    layer, x = nn.Linear(8, 5), torch.randn(4, 8, requires_grad=True)

    def penalty(fn):
        (gx,) = torch.autograd.grad(fn().pow(2).sum(), x, create_graph=True)
        return torch.autograd.grad(gx.pow(2).sum(), (x, layer.weight, layer.bias))

    ours = penalty(lambda: linear(x, layer, nn.GELU()))
    ref = penalty(lambda: F.gelu(F.linear(x, layer.weight, layer.bias)))
    for got, want in zip(ours, ref):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@needs_onednn
def test_training_path_off_where_it_does_not_apply(monkeypatch):
    monkeypatch.setattr(linear_module, "training_kernels", lambda dtype: ALL_ONEDNN)  # not this machine's choice
    layer, x = nn.Linear(8, 4), torch.randn(3, 8, requires_grad=True)
    assert ran_onednn(lambda: linear(x, layer).sum().backward())
    previous = set_onednn_linear(False)
    try:
        assert not ran_onednn(lambda: linear(x, layer).sum().backward())
    finally:
        set_onednn_linear(previous)
    with torch.autocast("cpu", dtype=torch.float16):  # only bf16 autocast is mapped onto the kernels
        assert not ran_onednn(lambda: linear(x, layer))
    # torch.func transforms and forward-mode AD: the standard ops, same numbers
    gx = torch.func.grad(lambda t: linear(t, layer, nn.GELU()).sum())(x.detach())
    ref = torch.func.grad(lambda t: F.gelu(F.linear(t, layer.weight, layer.bias)).sum())(x.detach())
    torch.testing.assert_close(gx, ref)
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x.detach(), torch.ones(3, 8))
        tangent = torch.autograd.forward_ad.unpack_dual(linear(dual, layer)).tangent
    torch.testing.assert_close(tangent, layer.weight.detach().sum(1).expand(3, 4))
    traced = torch.jit.trace(Mlp(8, 16), torch.randn(2, 8), check_trace=False)
    assert "_linear_pointwise" not in str(traced.inlined_graph)


def test_switch_from_the_environment():
    code = ("import torch; from torch import nn; from vision_attn.layers.linear import _mode;"
            "x = torch.randn(2, 4, requires_grad=True); w = nn.Linear(4, 3).weight;"
            "print(_mode(x, w), _mode(x.detach(), w.detach()))")
    assert printed_with_fast_paths_off(code) == ["None", "None"]


# ------------------------------------------------------------------------------------------------
# the self-check that chooses the kernels
@needs_onednn
def test_self_check_chooses_the_faster_kernel_and_never_a_wrong_one(monkeypatch):
    now = [0.0]  # a clock that only the kernels below advance: the timing is exact

    def costs(fn, seconds):
        def run(*args):
            now[0] += seconds
            return fn(*args)
        return run

    slow = {("forward", "aten"), ("input_grad", "aten"), ("weight_grad", "onednn")}
    kernels = {p: {k: costs(fn, 1.0 if (p, k) in slow else 0.1) for k, fn in ks.items()}
               for p, ks in linear_module.KERNELS.items()}
    kernels["forward"]["onednn"] = lambda x, w, b: F.linear(x, w, b) + 1  # faster but wrong: never chosen
    monkeypatch.setattr(linear_module, "KERNELS", kernels)
    plan = measure_kernels(torch.float32, shape=(16, 24, 40), rounds=3, clock=lambda: now[0])
    assert (plan.forward, plan.input_grad, plan.weight_grad) == ("aten", "onednn", "aten")
    assert plan.seconds["forward"] == {}
    assert plan.seconds["input_grad"] == pytest.approx({"aten": 1.0, "onednn": 0.1})
    assert plan.seconds["weight_grad"] == pytest.approx({"aten": 0.1, "onednn": 1.0})


def test_crossover_is_where_the_fitted_lines_meet():
    # ATen 1 s at 1 multiply-add and 10 s at 101; oneDNN 2 and 5: the lines 1 + 0.09 m and 2 + 0.03 m
    # (m from 1) meet at 1 + 1/0.06 = 17.7
    assert crossover({"aten": 1.0, "onednn": 2.0}, {"aten": 10.0, "onednn": 5.0}, 1, 101) == 18
    assert crossover({"aten": 2.0, "onednn": 1.0}, {"aten": 10.0, "onednn": 5.0}, 1, 101) == 0  # oneDNN wins both
    for large in ({"aten": 5.0, "onednn": 5.0}, {"aten": 4.0, "onednn": 5.0}):  # a tie or ATen at the large size
        with pytest.raises(ValueError, match="no size from which"):
            crossover({"aten": 1.0, "onednn": 1.0}, large, 1, 101)


@needs_onednn
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
               for p, ks in linear_module.KERNELS.items()}
    monkeypatch.setattr(linear_module, "KERNELS", kernels)
    plan = measure_kernels(torch.float32, shape=(16, 24, 40), rounds=3, clock=lambda: now[0], small_shape=(4, 8, 16))
    assert (plan.forward, plan.input_grad, plan.weight_grad) == ("onednn", "onednn", "onednn")
    assert plan.small_seconds["forward"] == pytest.approx({"aten": 1.0 + 0.002 * 512, "onednn": 3.0 + 0.001 * 512})
    for product in linear_module.KERNELS:  # 1 + 0.002 m = 3 + 0.001 m at m = 2000
        assert plan.onednn_from[product] in (2000, 2001)
        assert not plan.uses_onednn(product, 1999) and plan.uses_onednn(product, 2001)


@needs_onednn
def test_layers_below_the_crossover_train_through_the_standard_ops(monkeypatch):
    plan = KernelPlan("onednn", "onednn", "onednn", {}, onednn_from=dict(forward=1000, input_grad=4000, weight_grad=4000))
    monkeypatch.setattr(linear_module, "training_kernels", lambda dtype: plan)
    torch.manual_seed(0)
    layer = nn.Linear(10, 30)
    small, medium = torch.randn(3, 10, requires_grad=True), torch.randn(5, 10, requires_grad=True)
    with OpLog() as log:  # 900 multiply-adds: below every product's crossover
        y = linear(small, layer, nn.GELU())
    assert "mkldnn._linear_pointwise" not in log.ops and "_Linear" not in type(y.grad_fn).__name__
    with OpLog() as fwd:  # 1500: the forward above its crossover, the gradients below theirs
        y = linear(medium, layer, nn.GELU())
    with OpLog() as bwd:
        grads = torch.autograd.grad(y.sum(), (medium, layer.weight))
    assert "mkldnn._linear_pointwise" in fwd.ops and "mkldnn._linear_pointwise" not in bwd.ops
    ref = torch.autograd.grad(F.gelu(F.linear(medium, layer.weight, layer.bias)).sum(), (medium, layer.weight))
    for got, want in zip(grads, ref):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@needs_onednn
def test_self_checks_first_run_under_bf16_autocast_still_measure_the_kernels_themselves():
    # a model's first call is often under autocast (a bf16 benchmark, bf16-mixed training): the checks
    # must not compare a bf16 F.linear with oneDNN's fp32 result and turn the fast path off for good
    linear_module._onednn_works.cache_clear()
    try:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            assert _onednn_works()
            plan = measure_kernels(torch.float32, shape=(16, 24, 40), rounds=1)
        fc, x, out = nn.Linear(24, 40), torch.randn(3, 24), []

        def call() -> None:
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
                out.append(linear(x, fc))

        assert ran_onednn(call)
        assert out[0].dtype == torch.bfloat16
    finally:
        linear_module._onednn_works.cache_clear()
    assert all(set(plan.seconds[p]) == {"aten", "onednn"} for p in linear_module.KERNELS)  # every pair agreed


@needs_onednn
def test_training_kernels_are_measured_once_per_dtype_and_thread_count():
    plan = training_kernels(torch.float32)
    assert training_kernels(torch.float32) is plan
    for product in ("forward", "input_grad", "weight_grad"):
        assert getattr(plan, product) in ("onednn", "aten")
        assert set(plan.seconds[product]) in ({"onednn", "aten"}, set())


@needs_onednn
def test_the_choice_is_kept_in_the_cache_so_later_runs_make_the_same(monkeypatch, tmp_path):
    monkeypatch.setenv("VISION_ATTN_CACHE", str(tmp_path))
    linear_module._plan.cache_clear()
    try:
        plan = training_kernels(torch.bfloat16)
        stored = json.loads((tmp_path / linear_module.PLANS_FILE).read_text())
        (key,) = stored
        assert "bfloat16" in key and f"{torch.get_num_threads()} threads" in key and torch.__version__ in key
        assert stored[key]["weight_grad"] == plan.weight_grad

        linear_module._plan.cache_clear()  # a new process: reads the file, measures nothing

        def no_measuring(*args, **kwargs):
            raise AssertionError("measured again")

        monkeypatch.setattr(linear_module, "measure_kernels", no_measuring)
        assert training_kernels(torch.bfloat16) == plan

        damages = ({"forward": "mkl"}, {"forward": ["onednn"]}, {"onednn_from": {"forward": -1}},
                   {"onednn_from": {"fwd": 0}}, {"onednn_from": [["forward", 0]]},
                   {"forward": "onednn", "onednn_from": {}})  # oneDNN chosen without its crossover
        for damage in damages:
            assert linear_module._stored_plan({**stored[key], **damage}) is None
        del stored[key]["onednn_from"]  # an entry from before the crossover was measured: measured again
        (tmp_path / linear_module.PLANS_FILE).write_text(json.dumps(stored))
        linear_module._plan.cache_clear()
        monkeypatch.setattr(linear_module, "measure_kernels", lambda dtype, clock: ALL_ATEN)
        assert training_kernels(torch.bfloat16) == ALL_ATEN
        assert json.loads((tmp_path / linear_module.PLANS_FILE).read_text())[key]["forward"] == "aten"
    finally:
        linear_module._plan.cache_clear()


@needs_onednn
@pytest.mark.parametrize("name,kwargs,size", [
    ("vit_tiny_patch16_224", dict(depth=2, embed_dim=48, num_heads=2, num_classes=7), 32),
    ("swin_tiny_patch4_window7_224", dict(depths=(2, 2), embed_dim=16, num_heads=(1, 2), window_size=4, num_classes=7), 32),
])
def test_model_training_step_gradients_equal_the_standard_path(monkeypatch, name, kwargs, size):
    monkeypatch.setattr(linear_module, "training_kernels", lambda dtype: ALL_ONEDNN)  # not this machine's choice
    torch.manual_seed(0)
    model = vision_attn.create_model(name, img_size=size, **kwargs).eval()  # no dropout: the same function twice
    x = torch.randn(2, 3, size, size)

    def grads():
        model.zero_grad()
        with OpLog() as log:
            model(x).logsumexp(-1).sum().backward()
        return "mkldnn._linear_pointwise" in log.ops, {k: p.grad.clone() for k, p in model.named_parameters()}

    fast, ours = grads()
    previous = set_onednn_linear(False)
    try:
        standard, ref = grads()
    finally:
        set_onednn_linear(previous)
    assert fast and not standard
    for k in ref:
        torch.testing.assert_close(ours[k], ref[k], atol=1e-5, rtol=1e-4, msg=k)
