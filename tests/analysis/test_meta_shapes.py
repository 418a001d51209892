"""The meta-device shape rules (vision_attn.analysis.meta_shapes) against torch's own meta kernels:
the same shapes, strides and dtypes for every rule, the cases a rule declines left to torch (and its
errors), and counts identical to torch's FlopCounterMode on the commands' models."""
import contextlib
import random

import pytest
import torch

import vision_attn.analysis.flops as flops_module
import vision_attn.analysis.yaml_info as yaml_info_module
from vision_attn.analysis import count_flops, count_model_flops
from vision_attn.analysis.meta_shapes import RULES, MetaShapes, meta_shapes
from vision_attn.analysis.yaml_info import yaml_info
from vision_attn.models.yolo import build_detector

aten = torch.ops.aten


def meta(*shape, dtype=torch.float32):
    return torch.empty(shape, device="meta", dtype=dtype)


def spec(out):
    """Shape, dtype and the strides of every dimension longer than 1 of each tensor in ``out`` (the
    stride of a dimension of length 1 never changes what a later view or reshape does, and torch's
    own meta kernels differ there from one operation to the next)."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [(tuple(t.shape), tuple(s if n > 1 else None for n, s in zip(t.shape, t.stride())), t.dtype,
             t.device.type) for t in outs]


def assert_like_torch(func, *args, **kwargs):
    """The rule answers the call, with what torch's meta kernel returns."""
    ours = RULES[func](*args, **kwargs)
    assert ours is not NotImplemented, f"{func} declined {args} {kwargs}"
    assert spec(ours) == spec(func(*args, **kwargs)), f"{func} {[spec(a) for a in args if torch.is_tensor(a)]}"


x4 = meta(2, 8, 5, 6)
x4_cl = x4.contiguous(memory_format=torch.channels_last)
x4_perm = meta(2, 5, 6, 8).permute(0, 3, 1, 2)  # channels-last strides, arrived at by a permute
x4_sliced = meta(2, 8, 10, 6)[:, :, ::2]  # neither dense nor channels-last
x3_t = meta(2, 7, 4).transpose(1, 2)
x2_exp = meta(1, 5).expand(3, 5)
LAYOUTS = [x4, x4_cl, x4_perm, x4_sliced, x3_t, x2_exp, meta(7), meta()]


@pytest.mark.parametrize("name", ["gelu", "silu", "sigmoid", "tanh", "relu", "hardswish", "hardsigmoid", "exp",
                                  "sqrt", "rsqrt", "neg", "erf", "cos", "sin"])
@pytest.mark.parametrize("x", LAYOUTS, ids=range(len(LAYOUTS)))
def test_unary(name, x):
    assert_like_torch(getattr(aten, name).default, x)


@pytest.mark.parametrize("op", [aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor])
@pytest.mark.parametrize("a, b", [
    (x4, x4), (x4, meta(8, 1, 1)), (x4_cl, x4_cl), (x4_cl, meta(8, 1, 1)), (x4_cl, x4), (x4, x4_perm),
    (x4_sliced, x4), (x4_sliced, meta(6)), (x3_t, meta(2, 4, 7)), (x3_t, meta(7)), (x2_exp, x2_exp),
    (meta(1, 197, 192), meta(1, 197, 192).transpose(0, 1).transpose(0, 1)), (meta(3, 1), meta(1, 4)),
    (x4, 2.5), (x4, 3), (x4, meta()), (x4, torch.tensor(2.0)), (meta(3, dtype=torch.int64), 0.5),
    (meta(3, dtype=torch.int64), meta(3, dtype=torch.int64)), (meta(4, dtype=torch.float16), meta()),
])
def test_binary(op, a, b):
    assert_like_torch(op, a, b)


def test_elementwise_strides_random_layouts():
    """Broadcasts, permutations and slices of one or two operands, each as torch lays them out."""
    rng = random.Random(0)
    for _ in range(300):
        ndim = rng.randint(2, 5)
        shape = [rng.choice([1, 2, 3, 4]) for _ in range(ndim)]
        operands = []
        for _ in range(rng.randint(1, 2)):
            own = [n if rng.random() < 0.7 else 1 for n in shape]
            perm = list(range(ndim))
            rng.shuffle(perm)
            step = rng.choice([1, 1, 2])
            t = meta(*[own[p] * (step if i == 0 else 1) for i, p in enumerate(perm)])[::step]
            operands.append(t.permute(*[perm.index(i) for i in range(ndim)]))
        binary = [aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor]
        unary = [aten.gelu.default, aten.silu.default, aten.sigmoid.default, aten.relu.default]
        assert_like_torch(rng.choice(binary if len(operands) == 2 else unary), *operands)


def test_factories_and_initialisers():
    assert_like_torch(aten.zeros.default, [2, 3], device="meta")
    assert_like_torch(aten.ones.default, [4], dtype=torch.float16, device="meta")
    assert_like_torch(aten.full.default, [2, 2], 1.5, device="meta")
    assert_like_torch(aten.full.default, [2], 3, device="meta")
    assert_like_torch(aten.arange.default, 10, device="meta")
    assert_like_torch(aten.arange.start_step, 0, 1, 0.1, device="meta")
    assert_like_torch(aten.arange.start_step, 2, 11, 3, dtype=torch.float32, device="meta")
    for op, args in [(aten.fill_.Scalar, (1.0,)), (aten.zero_.default, ()), (aten.uniform_.default, (-1, 1)),
                     (aten.normal_.default, (0, 0.02))]:
        t = meta(3, 4)
        assert RULES[op](t, *args) is t


@pytest.mark.parametrize("x, w, bias, stride, padding, dilation, transposed, output_padding, groups", [
    (x4, meta(16, 8, 3, 3), meta(16), [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
    (x4_cl, meta(16, 8, 3, 3), None, [2, 2], [0, 0], [1, 1], False, [0, 0], 1),
    (x4, meta(8, 1, 3, 3), None, [1, 2], [1, 0], [2, 1], False, [0, 0], 8),
    (meta(1, 3, 224, 224), meta(192, 3, 16, 16), meta(192), [16, 16], [0, 0], [1, 1], False, [0, 0], 1),
    (x4, meta(8, 4, 2, 2), meta(4), [2, 2], [0, 0], [1, 1], True, [1, 0], 1),
    (meta(2, 4, 9), meta(6, 2, 3), None, [1], [1], [1], False, [0], 2),
    (meta(1, 2, 4, 5, 6), meta(3, 2, 3, 3, 3), None, [1, 1, 1], [1, 1, 1], [1, 1, 1], False, [0, 0, 0], 1),
])
def test_convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    assert_like_torch(aten.convolution.default, x, w, bias, stride, padding, dilation, transposed, output_padding,
                      groups)


def test_matrix_products_and_attention():
    assert_like_torch(aten.addmm.default, meta(4), meta(3, 5), meta(4, 5).t())
    assert_like_torch(aten.addmm.default, meta(3, 4), meta(3, 5), meta(5, 4))
    assert_like_torch(aten.mm.default, meta(5, 3).t(), meta(5, 4))
    assert_like_torch(aten.bmm.default, meta(2, 3, 5), meta(2, 4, 5).transpose(1, 2))
    qkv = meta(2, 197, 3, 3, 64).permute(2, 0, 3, 1, 4)  # (3, B, heads, N, d), as a ViT unbinds it
    q, k, v = qkv.unbind(0)
    assert_like_torch(aten._scaled_dot_product_flash_attention_for_cpu.default, q, k, v)
    h = meta(1, 3, 4, 8).transpose(1, 2)
    assert_like_torch(aten._scaled_dot_product_flash_attention_for_cpu.default, h, h, h, 0.0, False,
                      attn_mask=meta(1, 1, 4, 4), scale=0.5)


def test_normalisation_pooling_resampling_joining():
    assert_like_torch(aten.native_layer_norm.default, meta(1, 197, 192), [192], meta(192), meta(192), 1e-6)
    assert_like_torch(aten.native_layer_norm.default, x3_t, [7], None, None, 1e-5)
    assert_like_torch(aten.native_layer_norm.default, meta(2, 3, 8, dtype=torch.float16), [3, 8], None, None, 1e-5)
    c = meta(8)
    assert_like_torch(aten._native_batch_norm_legit_no_training.default, x4, c, c, c, c, 0.03, 1e-3)
    assert_like_torch(aten.native_batch_norm.default, x4, c, c, c, c, True, 0.03, 1e-3)
    assert_like_torch(aten.native_batch_norm.default, x4, None, None, None, None, True, 0.1, 1e-5)
    assert_like_torch(aten._softmax.default, x4, 1, False)
    assert_like_torch(aten._softmax.default, x4_perm, -1, False)
    assert_like_torch(aten.max_pool2d_with_indices.default, x4, [5, 5], [1, 1], [2, 2])
    assert_like_torch(aten.max_pool2d_with_indices.default, meta(1, 2, 7, 7), [3, 3], [2, 2], [1, 1], [1, 1], True)
    assert_like_torch(aten.max_pool2d_with_indices.default, meta(1, 2, 6, 6), [2], [], [0], [1], True)
    assert_like_torch(aten.upsample_nearest2d.default, x4, [10, 12])
    index = [None, None, meta(10, 1, dtype=torch.int64), meta(12, dtype=torch.int64)]
    assert_like_torch(aten._unsafe_index.Tensor, x4, index)
    assert_like_torch(aten.cat.default, [x4, meta(2, 3, 5, 6)], 1)
    assert_like_torch(aten.cat.default, [meta(1, 1, 192).expand(2, 1, 192), meta(2, 196, 192)], 1)
    assert_like_torch(aten.cat.default, [x3_t, x3_t], -1)
    assert_like_torch(aten.stack.default, [meta(2, 4, 7), meta(2, 4, 7)], 1)
    assert_like_torch(aten.stack.default, [x2_exp, meta(3, 5)], 0)
    assert_like_torch(aten.stack.default, [meta(3, 2), meta(3, 2)], -1)
    q = meta(2, 196, 3, 6, 64).permute(2, 0, 3, 1, 4)[0]  # a query of packed qkv, (B, heads, N, d)
    x1, x2 = q.chunk(2, dim=-1)
    assert_like_torch(aten.cat.default, [-x2, x1], -1)  # rotate-half (DINOv3)
    assert_like_torch(aten.stack.default, [-q[..., 1::2], q[..., ::2]], -1)  # interleaved pairs (EVA-02)
    assert RULES[aten.cat.default]([x4_perm, x4_perm], 1) is NotImplemented  # channels-last suggested: torch
    assert_like_torch(aten.cat.default, [x4_perm, x4], 1)  # mixed: the standard order
    assert_like_torch(aten.stack.default, [x4_sliced, x4_sliced], 2)
    assert_like_torch(aten.pow.Scalar, 100.0, meta(16))  # rotary periods
    assert_like_torch(aten.pow.Scalar, 2, x3_t)
    assert_like_torch(aten.mean.dim, x4, [2, 3], True)  # a global average pool
    assert_like_torch(aten.mean.dim, x4, [-1])
    assert_like_torch(aten.mean.dim, meta(2, 197, 192), [1])


@pytest.mark.parametrize("func, args", [
    (aten.convolution.default, (x4, meta(16, 3, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)),
    (aten.mm.default, (meta(3, 4), meta(5, 6))),
    (aten.add.Tensor, (meta(3, 4), meta(5, 4))),
    (aten.cat.default, ([x4, meta(3, 8, 5, 6)], 1)),
])
def test_a_call_torch_rejects_is_left_to_torch(func, args):
    assert RULES[func](*args) is NotImplemented
    with pytest.raises(RuntimeError), MetaShapes():
        func(*args)


@pytest.mark.parametrize("case", [
    (aten.cat.default, ([x4_cl, x4_cl], 1)),  # channels-last: torch's memory-format choice
    (aten.gelu.default, (torch.zeros(3),)),  # not on meta
    (aten.add.Tensor, (meta(3, dtype=torch.bool), meta(3, dtype=torch.bool))),
])
def test_uncovered_cases_run_torchs_kernel(case):
    func, args = case
    assert RULES[func](*args) is NotImplemented
    with MetaShapes():
        got = func(*args)
    assert spec(got) == spec(func(*args))


@pytest.fixture
def torch_meta_kernels(monkeypatch):
    """count_flops and yaml_info as before the rules: torch's FlopCounterMode and meta kernels alone."""
    monkeypatch.setattr(flops_module, "count_on_meta", lambda counter: counter)
    monkeypatch.setattr(flops_module, "meta_shapes", contextlib.nullcontext)
    monkeypatch.setattr(yaml_info_module, "meta_shapes", contextlib.nullcontext)


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "deit_tiny_distilled_patch16_224",
                                  "swin_tiny_patch4_window7_224", "vit_small_patch16_dinov3", "convnext_atto"])
def test_counts_equal_torchs_counter(name, request):
    ours = count_model_flops(name, depth=3)
    request.getfixturevalue("torch_meta_kernels")
    assert count_model_flops(name, depth=3) == ours


@pytest.mark.parametrize("yaml, scale", [("yolov8n.yaml", None), ("yolo11-seg.yaml", "s"), ("yolov8-cbam.yaml", "n")])
def test_yaml_info_equals_torchs_meta_kernels(yaml, scale, request):
    ours = yaml_info(yaml, scale=scale)
    request.getfixturevalue("torch_meta_kernels")
    assert yaml_info(yaml, scale=scale) == ours


def test_a_model_built_under_the_mode_counts_like_one_built_without():
    with torch.device("meta"), meta_shapes():
        ours = build_detector("yolov8n.yaml")
    with torch.device("meta"):
        plain = build_detector("yolov8n.yaml")
    assert [tuple(p.shape) for p in ours.parameters()] == [tuple(p.shape) for p in plain.parameters()]
    assert [int(s) for s in ours.stride] == [int(s) for s in plain.stride] == [8, 16, 32]
    assert count_flops(ours, (3, 640, 640)) == count_flops(plain, (3, 640, 640))
