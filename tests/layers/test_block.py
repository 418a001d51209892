"""Transformer blocks: pre-norm equals timm's Block; post-norm is norm(x + f(x)); injected parts are used."""
from __future__ import annotations

import pytest
import torch
from timm.models.vision_transformer import Block as TimmBlock
from torch import nn

import vision_attn
from vision_attn.layers import Attention, Block, Mlp, PostNormBlock


def perturb(module: nn.Module) -> nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return module


@pytest.mark.parametrize("init_values, qk_norm", [(None, False), (0.5, False), (None, True)])
def test_pre_norm_block_parity_with_timm(init_values, qk_norm):
    ours = perturb(Block(64, 4, qkv_bias=True, qk_norm=qk_norm, init_values=init_values)).eval()
    peer = TimmBlock(64, 4, qkv_bias=True, qk_norm=qk_norm, init_values=init_values).eval()  # timm's LayerNorm, eps 1e-6
    peer.load_state_dict(ours.state_dict(), strict=True)
    x = torch.randn(2, 9, 64)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), peer(x), atol=1e-5, rtol=1e-5)


def test_post_norm_block_is_norm_of_residual_sum():
    blk = perturb(PostNormBlock(32, 4)).eval()
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        y = blk.norm1(x + blk.attn(x))
        expected = blk.norm2(y + blk.mlp(y))
        out = blk(x)
        torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
        # the same weights in a pre-norm block compute something else
        pre = Block(32, 4)
        pre.load_state_dict(blk.state_dict())
        assert (pre.eval()(x) - out).abs().max() > 1e-2
    # every token is normalised on the way out
    torch.testing.assert_close(((out - blk.norm2.bias) / blk.norm2.weight).var(-1, unbiased=False),
                               torch.ones(2, 5), atol=1e-3, rtol=1e-3)


class ZeroAttention(nn.Module):
    """An injected attention that contributes nothing and counts its calls."""

    calls = 0

    def __init__(self, dim, num_heads, qkv_bias, qk_norm, attn_drop, proj_drop, norm_layer):
        super().__init__()
        self.scale = nn.Parameter(torch.zeros(()))

    def forward(self, x, rope=None):
        ZeroAttention.calls += 1
        return x * self.scale


class DoubleFFN(nn.Module):
    """An injected feed-forward layer: 2x, ignoring the hidden size."""

    def __init__(self, in_features, hidden_features, act_layer=nn.GELU, drop=0.0):
        super().__init__()
        self.hidden_features = hidden_features

    def forward(self, x):
        return 2 * x


def test_injected_attention_and_ffn():
    blk = Block(16, 2, mlp_ratio=3.0, attn_class=ZeroAttention, ffn_layer=DoubleFFN).eval()
    assert isinstance(blk.attn, ZeroAttention) and isinstance(blk.mlp, DoubleFFN)
    assert blk.mlp.hidden_features == 48
    x = torch.randn(2, 4, 16)
    with torch.no_grad():
        torch.testing.assert_close(blk(x), x + 2 * blk.norm2(x))


def test_injected_attention_in_vit():
    ZeroAttention.calls = 0
    model = vision_attn.create_model("vit_tiny_patch16_224", depth=3, img_size=32, attn_class=ZeroAttention)
    assert all(isinstance(b.attn, ZeroAttention) for b in model.blocks)
    assert not any(isinstance(m, Attention) for m in model.modules())
    model(torch.randn(1, 3, 32, 32))
    assert ZeroAttention.calls == 3
    assert isinstance(vision_attn.create_model("vit_tiny_patch16_224", depth=1, img_size=32).blocks[0].mlp, Mlp)

