"""Window attention pieces against timm's: partition, pair index, region mask, gather order, the
attention itself (fused, explicit, recorded weights, gradients), the mask cache and table resampling."""
from __future__ import annotations

import pytest
import torch
from torch import nn
import torch.nn.functional as F
from timm.layers import resize_rel_pos_bias_table
from timm.models import swin_transformer as timm_swin

from vision_attn.layers import (
    ShiftedWindows,
    WindowAttention,
    gather_tokens,
    record_attention,
    region_mask,
    relative_position_index,
    resample_relative_position_bias,
    window_index,
    window_partition,
    window_reverse,
)
from vision_attn.kernels import accelerate, packed_sdpa
from vision_attn.kernels.gather import gather_tokens as fast_gather_tokens


@pytest.mark.parametrize("window", [(7, 7), (4, 3)])
def test_partition_and_reverse(window):
    x = torch.randn(2, 8 * window[0] // 2 * 2, 6 * window[1], 5)
    H, W = x.shape[1:3]
    windows = window_partition(x, window)
    assert windows.shape == (2 * (H // window[0]) * (W // window[1]), window[0] * window[1], 5)
    expected = timm_swin.window_partition(x, window).reshape(windows.shape)
    torch.testing.assert_close(windows, expected, rtol=0, atol=0)
    torch.testing.assert_close(window_reverse(windows, window, H, W), x, rtol=0, atol=0)
    # the first window is the top-left wh x ww block, row-major
    torch.testing.assert_close(windows[0], x[0, : window[0], : window[1]].reshape(-1, 5), rtol=0, atol=0)


@pytest.mark.parametrize("window", [(7, 7), (3, 5), (1, 1)])
def test_relative_position_index_like_timm(window):
    ours = relative_position_index(window)
    assert ours.shape == (window[0] * window[1],) * 2
    assert torch.equal(ours, timm_swin.get_relative_position_index(*window))
    assert ours.max() == (2 * window[0] - 1) * (2 * window[1] - 1) - 1


@pytest.mark.parametrize("size, window, shift", [((14, 14), (7, 7), (3, 3)), ((49, 70), (7, 7), (3, 3)),
                                                 ((7, 14), (7, 7), (0, 3)), ((8, 12), (4, 6), (2, 3))])
def test_region_mask_like_timm(size, window, shift):
    """timm's block with a dynamic mask builds it over the padded map, as region_mask does."""
    block = timm_swin.SwinTransformerBlock(8, size, num_heads=2, window_size=window, shift_size=shift,
                                           always_partition=True, dynamic_mask=True)
    expected = block.get_attn_mask(torch.zeros(1, *size, 1))
    ours = region_mask(size, window, shift)
    assert ours.shape == (size[0] // window[0] * (size[1] // window[1]), window[0] * window[1], window[0] * window[1])
    if expected is None:  # timm builds no mask without a shift
        assert not ours.any()
    else:
        torch.testing.assert_close(ours, expected, rtol=0, atol=0)
    assert set(ours.unique().tolist()) <= {0.0, -100.0}


def _roll_pad_partition(x, window, shift, roll_before_pad):
    B, H, W, C = x.shape
    Hp, Wp = -(-H // window[0]) * window[0], -(-W // window[1]) * window[1]
    if roll_before_pad:
        x = F.pad(torch.roll(x, (-shift[0], -shift[1]), (1, 2)), (0, 0, 0, Wp - W, 0, Hp - H))
    else:
        x = torch.roll(F.pad(x, (0, 0, 0, Wp - W, 0, Hp - H)), (-shift[0], -shift[1]), (1, 2))
    return window_partition(x, window), (Hp, Wp)


@pytest.mark.parametrize("roll_before_pad", [True, False])
@pytest.mark.parametrize("size, shift", [((14, 14), (3, 3)), ((12, 17), (3, 3)), ((9, 10), (0, 3)), ((7, 7), (0, 0))])
def test_window_index_is_roll_pad_partition(size, shift, roll_before_pad):
    window = (7, 7)
    x = torch.randn(2, *size, 4)
    expected, (Hp, Wp) = _roll_pad_partition(x, window, shift, roll_before_pad)
    index = window_index(size, window, shift, roll_before_pad)
    assert sorted(index.tolist()) == list(range(Hp * Wp))  # a permutation of the padded map
    padded = F.pad(x, (0, 0, 0, Wp - size[1], 0, Hp - size[0])).reshape(2, Hp * Wp, 4)
    windows = gather_tokens(padded, index, torch.argsort(index)).view(-1, 49, 4)
    torch.testing.assert_close(windows, expected, rtol=0, atol=0)
    token_major = window_index(size, window, shift, roll_before_pad, token_major=True)
    windows = padded.index_select(1, token_major).view(2, 49, -1, 4)  # (B, N, nW, C)
    torch.testing.assert_close(windows.transpose(1, 2).reshape(-1, 49, 4), expected, rtol=0, atol=0)


@pytest.mark.parametrize("gather", [gather_tokens, fast_gather_tokens], ids=["plain", "fast"])
def test_gather_tokens_gradient_is_the_inverse_gather(gather):
    index = torch.randperm(30)
    x = torch.randn(2, 30, 3, requires_grad=True)
    g = torch.randn(2, 30, 3)
    y = gather(x, index, torch.argsort(index))
    torch.testing.assert_close(y, x.detach().index_select(1, index), rtol=0, atol=0)
    y.backward(g)
    expected, = torch.autograd.grad(x.index_select(1, index), x, g)
    torch.testing.assert_close(x.grad, expected, rtol=0, atol=0)
    if gather is gather_tokens:  # a gather in the backward graph, no scatter-add (which Inductor compiles to atomics)
        ops = [n.name() for n in _backward_nodes(y.grad_fn)]
        assert ops == ["IndexCopyBackward0"], ops


def _backward_nodes(fn):
    """The autograd nodes from ``fn`` down to the leaves (AccumulateGrad excluded)."""
    out, todo = [], [fn]
    while todo:
        node = todo.pop()
        if node is None or node.name().endswith("AccumulateGrad"):
            continue
        out.append(node)
        todo += [f for f, _ in node.next_functions]
    return out


def test_shifted_windows_cache_builds_once_per_size():
    holder = nn.Module()
    holder.windows = ShiftedWindows()
    cache = accelerate(holder).windows  # kept between calls only on the fast path
    a = cache.mask((14, 14), (7, 7), (3, 3), torch.device("cpu"), torch.float32)
    b = cache.mask((14, 14), (7, 7), (3, 3), torch.device("cpu"), torch.float32)
    assert a is b and len(cache) == 1
    cache.index((12, 14), (7, 7), (3, 3), True, False, torch.device("cpu"))
    cache.mask((21, 14), (7, 7), (3, 3), torch.device("cpu"), torch.float32)
    assert len(cache) == 3
    cache.clear()
    assert len(cache) == 0


def _timm_attention(dim=32, heads=4, window=(7, 7)):
    peer = timm_swin.WindowAttention(dim, num_heads=heads, window_size=window)
    ours = WindowAttention(dim, heads, window)
    missing, unexpected = ours.load_state_dict(peer.state_dict(), strict=False)
    assert not unexpected and not missing
    return peer.eval(), ours.eval()


@pytest.mark.parametrize("shifted", [False, True])
def test_window_attention_like_timm(shifted):
    peer, ours = _timm_attention()
    assert set(ours.state_dict()) == {"relative_position_bias_table", "qkv.weight", "qkv.bias", "proj.weight", "proj.bias"}
    mask = region_mask((14, 14), (7, 7), (3, 3)) if shifted else None  # 4 windows
    x = torch.randn(3 * 4, 49, 32)
    with torch.no_grad():
        expected = peer(x, mask)
        out = ours(x, mask)
        with record_attention(ours) as maps:
            explicit = ours(x, mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(explicit, expected, atol=1e-5, rtol=1e-4)
    assert len(maps) == 1 and maps[0].shape == (12, 4, 49, 49)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(12, 4, 49))
    if shifted:  # tokens of different regions do not attend to each other
        assert maps[0][3][:, mask[3] < 0].max() < 1e-30


def test_token_major_windows_equal_window_rows():
    _, ours = _timm_attention()
    mask = region_mask((14, 14), (7, 7), (3, 3))
    x = torch.randn(3 * 4, 49, 32)
    with torch.no_grad():
        rows = ours(x, mask)  # (B*nW, N, C)
        token_major = ours(x.view(3, 4, 49, 32).transpose(1, 2).contiguous(), mask)  # (B, N, nW, C)
    torch.testing.assert_close(token_major.transpose(1, 2).reshape(12, 49, 32), rows, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("shifted", [False, True])
def test_window_attention_gradients_like_timm(shifted):
    peer, ours = _timm_attention(heads=2)
    peer.train(), ours.train()
    mask = region_mask((14, 14), (7, 7), (3, 3)) if shifted else None
    x = torch.randn(8, 49, 32)
    g = torch.randn(8, 49, 32)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    peer(xa, mask).backward(g)
    ours(xb, mask).backward(g)
    torch.testing.assert_close(xb.grad, xa.grad, atol=1e-5, rtol=1e-4)
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, peer.get_parameter(name).grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mask_batch", [1, 2])
def test_packed_attention_kernel_gradients(dtype, mask_batch):
    """The CPU training kernel (fused forward, recomputed backward, packed qkv) against autograd of
    the explicit product."""
    qkv = torch.randn(2, 9, 6, 3, 8, dtype=dtype, requires_grad=True)  # (B, N, G, 3, d)
    mask = torch.randn(mask_batch, 6, 9, 9, dtype=dtype, requires_grad=True)
    out = packed_sdpa(qkv, mask)
    assert out.shape == (2, 9, 6, 8)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (qkv, mask), g)
    q, k, v = (qkv[..., i, :].float().transpose(1, 2) for i in range(3))
    ref = (torch.softmax(q @ k.transpose(-2, -1) / 8**0.5 + mask.float(), -1) @ v).transpose(1, 2)
    ref_grads = torch.autograd.grad(ref, (qkv, mask), g.float())
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(out.float(), ref, **tol)
    for a, b in zip(grads, ref_grads):
        assert a.shape == b.shape and a.dtype == dtype
        torch.testing.assert_close(a.float(), b.float(), **tol)


def test_bias_table_is_the_only_position_state():
    attn = WindowAttention(16, 2, (5, 5))
    assert attn.relative_position_bias_table.shape == (81, 2)
    assert not list(attn.buffers())
    bias = attn.relative_position_bias()
    assert bias.shape == (2, 25, 25)
    torch.testing.assert_close(bias[:, 0, 0], attn.relative_position_bias_table[40])  # offset (0, 0): the centre


@pytest.mark.parametrize("old, new", [((7, 7), (12, 12)), ((12, 12), (7, 7)), ((7, 7), (4, 4)), ((7, 7), (7, 4))])
def test_resample_relative_position_bias_like_timm(old, new):
    table = torch.randn((2 * old[0] - 1) * (2 * old[1] - 1), 3)
    ours = resample_relative_position_bias(table, new)
    shape = ((2 * new[0] - 1) * (2 * new[1] - 1), 3)
    expected = resize_rel_pos_bias_table(table, new_window_size=new, new_bias_shape=shape)
    assert ours.shape == shape
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)
    assert resample_relative_position_bias(table, old) is table
