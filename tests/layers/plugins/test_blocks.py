"""Every registered attention block: shape kept, gradient to every parameter, gates in (0, 1),
clear errors on tensors that are not (B, C, H, W)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from vision_attn import ConfigError, DataError, get_attention
from vision_attn.layers.plugins import ATTENTION_BLOCKS

BLOCKS = [n for n in ATTENTION_BLOCKS if n != "none"]


def gates(block: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    out = block.attention(x)
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("name", BLOCKS)
@pytest.mark.parametrize("channels, size", [(64, (9, 13)), (24, (1, 1))])
def test_shape_and_gradient(name, channels, size):
    block = get_attention(name, channels).train()
    x = torch.randn(3, channels, *size, requires_grad=True)
    out = block(x)
    assert out.shape == x.shape
    (out * torch.randn_like(out)).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    for key, p in block.named_parameters():
        assert p.grad is not None, f"{name}: {key} got no gradient"
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, f"{name}: {key} got a zero gradient"


@pytest.mark.parametrize("name", BLOCKS)
def test_attention_values_are_gates_in_the_open_unit_interval(name):
    block = get_attention(name, 32).eval()
    x = torch.randn(2, 32, 10, 7) * 3
    with torch.no_grad():
        g = gates(block, x)
        out = block(x)
    for gate in g:
        assert gate.dim() == 4 and gate.shape[0] == 2
        assert (gate > 0).all() and (gate < 1).all()
    # the output is the input times the gates (CBAM: the spatial gate is computed on x * channel gate)
    expected = x
    for gate in g:
        expected = expected * gate
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)


def test_gate_shapes():
    x = torch.randn(2, 64, 10, 7)
    assert get_attention("se", 64).attention(x).shape == (2, 64, 1, 1)
    assert get_attention("eca", 64).attention(x).shape == (2, 64, 1, 1)
    for name in ("cbam", "cbam_ultralytics"):
        c, s = get_attention(name, 64).eval().attention(x)
        assert c.shape == (2, 64, 1, 1) and s.shape == (2, 1, 10, 7)
    a_h, a_w = get_attention("coord", 64).eval().attention(x)
    assert a_h.shape == (2, 64, 10, 1) and a_w.shape == (2, 64, 1, 7)


@pytest.mark.parametrize("name", BLOCKS)
@pytest.mark.parametrize("shape", [(2, 64), (64, 5, 5), (1, 2, 64, 5, 5)])
def test_not_4d_is_a_clear_error(name, shape):
    block = get_attention(name, 64)
    with pytest.raises(DataError, match=r"expects a \(B, C, H, W\) feature map") as info:
        block(torch.randn(*shape))
    assert str(tuple(shape)) in str(info.value)


@pytest.mark.parametrize("name", BLOCKS)
def test_wrong_channel_count_is_a_clear_error(name):
    with pytest.raises(DataError, match="built for 64 channels.*32 channels"):
        get_attention(name, 64)(torch.randn(1, 32, 4, 4))


def test_none_is_the_identity():
    block = get_attention("none", 64)
    x = torch.randn(1, 64, 3, 3)
    assert block(x) is x and not list(block.parameters())


@pytest.mark.parametrize("name", BLOCKS)
def test_blocks_keep_no_persistent_state_but_weights(name):
    block = get_attention(name, 64)
    floating = {k for k, v in block.state_dict().items() if v.is_floating_point()}
    params = {k for k, _ in block.named_parameters()}
    norms = {k for k in floating - params if ".running_" in f".{k}"}
    assert floating - params == norms  # only batch-norm statistics besides the weights


def test_registry_unknown_name_suggests():
    with pytest.raises(ConfigError, match="'cbam'") as info:
        get_attention("cbma", 64)
    assert "known blocks: se, cbam, cbam_ultralytics, eca, coord, none" in str(info.value)


def test_registry_bad_arguments_name_the_accepted_ones():
    with pytest.raises(ConfigError, match="reducton.*reduction, divisor"):
        get_attention("se", 64, reducton=8)
    with pytest.raises(ConfigError, match="channels must be a positive int"):
        get_attention("se", 0)
    with pytest.raises(ConfigError, match="kernel_size must be a positive odd int"):
        get_attention("cbam", 64, kernel_size=4)
    with pytest.raises(ConfigError, match="reduction must be positive"):
        get_attention("se", 64, reduction=0)


def test_register_attention():
    from vision_attn.layers.plugins import register_attention
    from vision_attn.layers.plugins.registry import ATTENTION_BLOCKS as table

    def double(channels: int, *, factor: float = 2.0) -> nn.Module:
        return nn.Identity()

    register_attention("test_double", double)
    try:
        assert isinstance(get_attention("test_double", 8, factor=3.0), nn.Identity)
        with pytest.raises(ConfigError, match="registered already"):
            register_attention("test_double", double)
    finally:
        del table["test_double"]
