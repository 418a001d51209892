"""Attention on the CPU fast paths (vision_attn.kernels.sdpa, packed_sdpa and the explicit product of
vision_attn.kernels.explicit): numbers against the fused kernel, its gradients (q, k, v and a broadcast
mask), where the plan's explicit kernel is used and where not, and the measured, cached choice.

The tests choose the attention kernel with fixed plans built here; the ones that run the self-check
say so and use their own temporary cache."""
from __future__ import annotations

import copy
import dataclasses
import importlib
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import vision_attn
from vision_attn.kernels import MAX_EXPLICIT_TOKENS, KernelPlan, accelerate, kernel_plan, packed_sdpa, resolve_plan, sdpa
from vision_attn.kernels.attention import _explicit
from vision_attn.kernels.cache import PLANS_FILE
from vision_attn.kernels.explicit import explicit_attention
from vision_attn.layers import attend

from tests.ops import SMALL_MODELS, ops_of, printed_with_fast_paths_off

measure = importlib.import_module("vision_attn.kernels.measure")
plan_module = importlib.import_module("vision_attn.kernels.plan")


def ran_fused(fn) -> bool:
    return any("scaled_dot_product" in op for op in ops_of(fn))


def use_explicit(q, k, v, mask=None, dropout_p=0.0) -> bool:
    """Whether sdpa takes the explicit kernel for these operands under the current plan."""
    return _explicit(q, k, v, mask, dropout_p)


def attention_plan(kernel: str) -> KernelPlan:
    """The fixed "onednn" plan with ``kernel`` ("explicit" or "fused") for attention in both dtypes."""
    fixed = resolve_plan("onednn")
    return KernelPlan("onednn", {dtype: dataclasses.replace(choice, attention=kernel)
                                 for dtype, choice in fixed.choices.items()})


def operands(B, G, N, d, dtype, mask_shape=None, packed=False, seed=0):
    """q, k, v (B, G, N, d), strided views of one packed tensor when ``packed``; an additive mask that
    needs a gradient, broadcasting to (B, G, N, N)."""
    gen = torch.Generator().manual_seed(seed)
    if packed:  # (B, N, 3, G, d) as a qkv projection gives them: non-contiguous views
        qkv = torch.randn(B, N, 3, G, d, generator=gen).to(dtype)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
    else:
        q, k, v = (torch.randn(B, G, N, d, generator=gen).to(dtype) for _ in range(3))
    mask = torch.randn(*mask_shape, generator=gen).to(dtype) if mask_shape else None
    return q, k, v, mask


def grads(fn, q, k, v, mask, dout):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    m = mask.detach().clone().requires_grad_() if mask is not None else None
    out = fn(*leaves, m)
    out.backward(dout.to(out.dtype))
    return [out] + [t.grad for t in leaves] + ([m.grad] if m is not None else [])


def relative_error(a: torch.Tensor, ref: torch.Tensor) -> float:
    a, ref = a.detach().double(), ref.detach().double()
    return float((a - ref).abs().max() / ref.abs().max())


def fused(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("B,G,N,d,mask_shape,packed", [
    (2, 3, 50, 16, None, False),
    (1, 2, 7, 12, None, True),  # batch 1, odd sizes, strided views
    (2, 4, 49, 32, (1, 4, 49, 49), True),  # Swin: one bias for the batch, needs a gradient
    (3, 2, 17, 8, (3, 2, 17, 17), False),  # a full-size mask
])
def test_explicit_attention_and_its_gradients_match_the_fused_kernel(dtype, tol, B, G, N, d, mask_shape, packed):
    q, k, v, mask = operands(B, G, N, d, dtype, mask_shape, packed)
    dout = torch.randn(B, G, N, d, generator=torch.Generator().manual_seed(1))
    ref = grads(lambda *t: fused(*(x.double() if x is not None else None for x in t)), q, k, v, mask, dout.double())
    ours = grads(explicit_attention, q, k, v, mask, dout)
    theirs = grads(fused, q, k, v, mask, dout)
    for name, a, f, r in zip(["out", "dq", "dk", "dv", "dmask"], ours, theirs, ref):
        assert a.shape == r.shape and a.dtype == dtype, name
        err = relative_error(a, r)
        assert err <= tol, f"{name}: {err:.2e}"
        if dtype == torch.bfloat16:  # the fused kernel keeps fp32 logits; bf16 logits cost ~2x its error, ~5x with a bf16 mask
            assert err <= 6 * relative_error(f, r), f"{name}: {err:.2e} against fused {relative_error(f, r):.2e}"


@pytest.mark.parametrize("mask_shape", [None, (1, 3, 10, 10)])
def test_second_derivatives_through_the_explicit_path(mask_shape):
    """create_graph=True (a gradient penalty): the backward runs differentiable ops, not the in-place ones."""
    q, k, v, mask = operands(2, 3, 10, 8, torch.float64, mask_shape)

    def second(fn, cast):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = fn(*(cast(t) for t in leaves), cast(mask) if mask is not None else None)
        dq, = torch.autograd.grad(out.double().pow(2).sum(), leaves[0], create_graph=True)
        return torch.autograd.grad(dq.double().sum(), leaves[1:])

    reference = second(lambda q, k, v, m: torch.softmax(q @ k.transpose(-2, -1) * 8 ** -0.5 + (0 if m is None else m), -1) @ v,
                       lambda t: t)
    ours = second(explicit_attention, lambda t: t.float())
    for a, r in zip(ours, reference):
        assert relative_error(a, r) <= 1e-5


def test_without_a_graph_nothing_is_kept_for_a_backward():
    q, k, v, _ = operands(2, 2, 9, 8, torch.float32)
    q.requires_grad_()
    with torch.no_grad():
        out = explicit_attention(q, k, v)
    assert out.grad_fn is None
    assert explicit_attention(q, k, v).grad_fn is not None


@pytest.mark.parametrize("kernel", ["explicit", "fused"])
def test_sdpa_takes_the_plans_kernel_on_the_cpu(kernel):
    q, k, v, mask = operands(2, 3, 20, 8, torch.bfloat16, (1, 3, 20, 20))
    out = []
    with kernel_plan(attention_plan(kernel)):
        assert ran_fused(lambda: out.append(sdpa(q, k, v))) == (kernel == "fused")
        assert ran_fused(lambda: out.append(attend(q, k, v, mask, sdpa=sdpa)[0])) == (kernel == "fused")  # an accelerated layer's call
    torch.testing.assert_close(out[0].float(), fused(q, k, v, None).float(), atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(out[1].float(), fused(q, k, v, mask).float(), atol=3e-2, rtol=3e-2)


def test_the_fixed_plan_takes_the_explicit_kernel_in_bf16_only():
    q, k, v, _ = operands(1, 2, 10, 8, torch.bfloat16)
    with kernel_plan("onednn"):
        assert use_explicit(q, k, v) and not use_explicit(q.float(), k.float(), v.float())


@pytest.mark.parametrize("case", ["dropout", "aten plan"])
def test_the_fused_kernel_wherever_the_explicit_path_is_not_a_drop_in(case):
    q, k, v, _ = operands(1, 1, 10, 8, torch.float32)
    with kernel_plan(attention_plan("explicit")):
        assert use_explicit(q, k, v)  # the same tensors otherwise take it
        if case == "dropout":
            assert not use_explicit(q, k, v, dropout_p=0.1)
        else:
            with kernel_plan("aten"):
                assert not use_explicit(q, k, v)
                assert ran_fused(lambda: sdpa(q, k, v))


def test_fx_graphs_hold_the_fused_call():
    """torch.fx traces an accelerated layer, or a function that calls sdpa or packed_sdpa, into the
    standard fused call: a graph computes what the plain layer does."""
    x = torch.randn(2, 3, 32, 32)
    plain = vision_attn.create_model("vit_tiny_patch16_224", depth=1, img_size=32, num_classes=3).eval()
    fast = accelerate(copy.deepcopy(plain))

    class Direct(nn.Module):
        def forward(self, q, k, v):
            return sdpa(q, k, v)

    class Packed(nn.Module):
        def forward(self, qkv, mask):
            return packed_sdpa(qkv, mask)

    q, k, v, _ = operands(1, 2, 10, 8, torch.float32)
    with kernel_plan(attention_plan("explicit")):
        layer = torch.fx.symbolic_trace(fast)
        assert "scaled_dot_product_attention" in layer.code
        torch.testing.assert_close(layer(x), plain(x), atol=1e-5, rtol=1e-5)
        direct = torch.fx.symbolic_trace(Direct())
        assert "scaled_dot_product_attention" in direct.code
        torch.testing.assert_close(direct(q, k, v), sdpa(q, k, v), atol=1e-5, rtol=1e-5)
        packed = torch.fx.symbolic_trace(Packed())
        qkv, bias = torch.randn(2, 10, 4, 3, 8), torch.randn(1, 4, 10, 10)
        torch.testing.assert_close(packed(qkv, bias), packed_sdpa(qkv, bias), atol=1e-5, rtol=1e-5)


def test_sequences_past_the_limit_and_other_dtypes_run_fused():
    with kernel_plan(attention_plan("explicit")):
        assert not use_explicit(*operands(1, 1, MAX_EXPLICIT_TOKENS + 1, 8, torch.float32)[:3])
        assert not use_explicit(*operands(1, 1, 10, 8, torch.float16)[:3])
        assert not use_explicit(*operands(1, 1, 10, 8, torch.float64)[:3])
        q, k, v, mask = operands(1, 2, 10, 8, torch.bfloat16, (1, 2, 10, 10))
        assert use_explicit(q, k, v, mask) and not use_explicit(q, k, v, mask.float())  # mixed dtypes: fused
        with torch.autograd.forward_ad.dual_level():
            assert not use_explicit(q, k, v)
        batched = q[None].expand(2, -1, -1, -1, -1)
        assert torch.func.vmap(lambda q: torch.tensor(float(use_explicit(q, q, q))))(batched).sum() == 0


def test_packed_attention_under_torch_func_takes_the_standard_ops():
    """torch.func.grad through Swin's packed attention with a learned bias: the standard ops (the
    recomputing autograd.Function defines no functorch rule), the same gradients as eagerly."""
    qkv, bias = torch.randn(2, 10, 4, 3, 8), torch.randn(1, 4, 10, 10)
    loss = lambda qkv, bias: packed_sdpa(qkv, bias).square().sum()  # noqa: E731
    ours = torch.func.grad(loss, argnums=(0, 1))(qkv, bias)
    leaves = [qkv.clone().requires_grad_(), bias.clone().requires_grad_()]
    ref = torch.autograd.grad(loss(*leaves), leaves)
    for got, want in zip(ours, ref):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_switch_from_the_environment():
    code = ("import torch; from vision_attn.kernels import current_plan; from vision_attn.kernels.attention import _explicit;"
            "q = torch.randn(1, 2, 5, 4).bfloat16(); print(_explicit(q, q, q, None), current_plan().choice(torch.bfloat16).attention)")
    assert printed_with_fast_paths_off(code) == ["False", "fused"]


# ------------------------------------------------------------------------------------------------
# the self-check that chooses the kernel
def test_measure_attention_chooses_the_faster_and_never_a_wrong_one(monkeypatch):
    """measure_attention itself with a fake clock (no plan, no cache)."""
    now = [0.0]

    def costs(fn, seconds):
        def run(*args):
            now[0] += seconds
            return fn(*args)
        return run

    kernels = {"fused": costs(measure.ATTENTION["fused"], 1.0), "explicit": costs(measure.ATTENTION["explicit"], 0.1)}
    monkeypatch.setattr(measure, "ATTENTION", kernels)
    result = measure.measure_attention(torch.float32, shape=(1, 2, 16, 8), rounds=3, clock=lambda: now[0])
    assert result["kernel"] == "explicit"
    assert result["seconds"] == pytest.approx({"fused": 1.0, "explicit": 0.1})
    kernels["explicit"] = lambda q, k, v: explicit_attention(q, k, v) + 1  # fast but wrong: never chosen
    assert measure.measure_attention(torch.float32, shape=(1, 2, 16, 8), rounds=3,
                                     clock=lambda: now[0]) == {"kernel": "fused", "seconds": {}}


def test_the_first_measurement_under_autocast_measures_the_kernels_themselves():
    """measure_attention itself (no plan, no cache), from inside inference mode and bf16 autocast."""
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        result = measure.measure_attention(torch.float32, shape=(1, 2, 16, 8), rounds=1)
    assert set(result["seconds"]) == {"fused", "explicit"}  # the two agreed in fp32


def test_the_choice_is_measured_once_and_kept_in_the_cache(monkeypatch, tmp_path):
    """Runs the self-checks of a measured plan in a temporary cache, then reads and damages that cache."""
    monkeypatch.setenv("VISION_ATTN_CACHE", str(tmp_path))
    kernel = KernelPlan("measured").choice(torch.bfloat16).attention
    assert kernel in ("fused", "explicit")
    stored = json.loads((tmp_path / PLANS_FILE).read_text())
    (key,) = [k for k in stored if k.startswith("attention; ")]
    assert "bfloat16" in key and f"{torch.get_num_threads()} threads" in key and torch.__version__ in key
    assert stored[key]["kernel"] == kernel and set(stored[key]["seconds"]) == {"fused", "explicit"}

    monkeypatch.setattr(plan_module, "measure_attention", lambda *a, **k: pytest.fail("measured again"))
    assert KernelPlan("measured").choice(torch.bfloat16).attention == kernel  # a new process: reads the file

    stored[key]["kernel"] = "flash"  # a damaged entry is measured again
    (tmp_path / PLANS_FILE).write_text(json.dumps(stored))
    monkeypatch.setattr(plan_module, "measure_attention", lambda *a, **k: {"kernel": "fused", "seconds": {}})
    assert KernelPlan("measured").choice(torch.bfloat16).attention == "fused"
    assert json.loads((tmp_path / PLANS_FILE).read_text())[key]["kernel"] == "fused"


@pytest.mark.parametrize("name,kwargs,size", SMALL_MODELS)
def test_bf16_training_step_gradients_on_either_kernel_agree(name, kwargs, size):
    torch.manual_seed(0)
    model = accelerate(vision_attn.create_model(name, img_size=size, **kwargs)).eval()  # no dropout: the same function twice
    x = torch.randn(2, 3, size, size)

    def step(kernel):
        model.zero_grad(set_to_none=True)
        with kernel_plan(attention_plan(kernel)):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
            out.float().square().mean().backward()
        return out.detach().float(), {n: p.grad.clone() for n, p in model.named_parameters()}

    out_e, g_e = step("explicit")
    out_f, g_f = step("fused")
    torch.testing.assert_close(out_e, out_f, atol=5e-2, rtol=5e-2)
    for n in g_f:
        assert relative_error(g_e[n], g_f[n]) < 0.1, n
