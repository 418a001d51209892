"""Multi-head self-attention: fused and explicit paths agree, weights are recorded on request, and
the numbers equal timm's Attention with the same weights."""
from __future__ import annotations

import pytest
import timm.layers
import torch
from torch import nn

import vision_attn
from vision_attn import ConfigError
from vision_attn.layers import Attention, attend, record_attention


def test_attend_fused_equals_explicit():
    q, k, v = (torch.randn(2, 3, 7, 8) for _ in range(3))
    mask = torch.randn(1, 1, 7, 7)
    fused, none = attend(q, k, v, mask=mask)
    explicit, weights = attend(q, k, v, mask=mask, keep_weights=True)
    assert none is None
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    reference = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5 + mask, dim=-1)
    torch.testing.assert_close(weights, reference, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(explicit, reference @ v, atol=1e-5, rtol=1e-5)


def test_record_attention_on_one_module():
    attn = Attention(32, num_heads=4).eval()
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        fused = attn(x)
        with record_attention(attn) as maps:
            explicit = attn(x)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    assert len(maps) == 1
    weights = maps[0]
    assert weights.shape == (2, 4, 9, 9)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 9))
    assert attn.keep_weights is False and attn.weights is None


def test_record_attention_on_a_vit():
    model = vision_attn.create_model("vit_tiny_patch16_224", depth=3, img_size=32).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        fused = model(x)
        with record_attention(model) as maps:
            explicit = model(x)
            assert all(b.attn.keep_weights for b in model.blocks)
    torch.testing.assert_close(fused, explicit, atol=1e-4, rtol=1e-4)
    assert len(maps) == 3  # one per block
    for m in maps:
        assert m.shape == (2, 3, 5, 5)  # (B, heads, 1 + 2*2, 1 + 2*2)
        torch.testing.assert_close(m.sum(-1), torch.ones(2, 3, 5))
    assert all(b.attn.keep_weights is False and b.attn.weights is None for b in model.blocks)
    with torch.no_grad():  # hooks are removed: the list no longer grows
        model(x)
    assert len(maps) == 3


def test_record_attention_restores_after_an_error():
    model = vision_attn.create_model("vit_tiny_patch16_224", depth=1, img_size=32)
    with pytest.raises(RuntimeError, match="boom"):
        with record_attention(model):
            raise RuntimeError("boom")
    assert model.blocks[0].attn.keep_weights is False
    assert not model.blocks[0].attn._forward_hooks


@pytest.mark.parametrize("qkv_bias, qk_norm", [(True, False), (False, False), (True, True)])
def test_parity_with_timm_attention(qkv_bias, qk_norm):
    ours = Attention(48, num_heads=6, qkv_bias=qkv_bias, qk_norm=qk_norm)
    peer = timm.layers.Attention(48, num_heads=6, qkv_bias=qkv_bias, qk_norm=qk_norm, norm_layer=nn.LayerNorm)
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    peer.load_state_dict(ours.state_dict(), strict=True)
    ours.eval(), peer.eval()
    x = torch.randn(2, 10, 48)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), peer(x), atol=1e-5, rtol=1e-5)


def test_dim_not_divisible_by_heads():
    with pytest.raises(ConfigError, match="not divisible by num_heads"):
        Attention(50, num_heads=6)
