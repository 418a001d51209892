"""The Swin block under both window rules equals timm's and torchvision's blocks, at sizes that are
window multiples and sizes that need padding; the rules themselves."""
from __future__ import annotations

import pytest
import torch
import torchvision.models.swin_transformer as tv_swin
from timm.models.swin_transformer import SwinTransformerBlock as TimmBlock

from vision_attn.layers import SwinBlock, TimmWindows, TorchvisionWindows, relative_position_index


def _tv_state(ours: SwinBlock) -> dict:
    """Our block keys -> torchvision's block (mlp.fc1/fc2 are mlp.0/mlp.3 there)."""
    sd = {k.replace("mlp.fc1", "mlp.0").replace("mlp.fc2", "mlp.3"): v for k, v in ours.state_dict().items()}
    sd["attn.relative_position_index"] = relative_position_index(ours.window_size).flatten()
    return sd


@pytest.mark.parametrize("size", [(14, 14), (12, 17), (6, 8)])
@pytest.mark.parametrize("shift", [0, 3])
def test_timm_rule_like_timm(size, shift):
    configured = (14, 14)
    peer = TimmBlock(16, configured, num_heads=2, window_size=7, shift_size=shift, dynamic_mask=True).eval()
    ours = SwinBlock(16, 2, (7, 7), (shift, shift), configured, rule=TimmWindows()).eval()
    ours.load_state_dict(peer.state_dict())
    x = torch.randn(2, *size, 16)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), peer(x), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("size", [(14, 14), (12, 17), (6, 8), (7, 7)])
@pytest.mark.parametrize("shift", [0, 3])
def test_torchvision_rule_like_torchvision(size, shift):
    ours = SwinBlock(16, 2, (7, 7), (shift, shift), (14, 14), rule=TorchvisionWindows()).eval()
    peer = tv_swin.SwinTransformerBlock(16, 2, [7, 7], [shift, shift]).eval()
    peer.load_state_dict(_tv_state(ours))
    x = torch.randn(2, *size, 16)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), peer(x), atol=1e-5, rtol=1e-4)


def test_rules_differ_where_the_padded_size_decides():
    """6x8 map, configured 7x7 (swin_tiny's last stage at 192x256): timm keeps no shift in either
    dimension (configured 7 <= window), torchvision shifts the width (padded to 14 > 7)."""
    timm_rule, tv_rule = TimmWindows(), TorchvisionWindows()
    assert timm_rule.configure((7, 7), (7, 7), (3, 3)) == ((7, 7), (0, 0))
    assert tv_rule.configure((7, 7), (7, 7), (3, 3)) == ((7, 7), (3, 3))
    assert tv_rule.at_run_time((7, 14), (7, 7), (3, 3)) == (0, 3)
    assert timm_rule.at_run_time((7, 14), (7, 7), (0, 0)) == (0, 0)
    a = SwinBlock(16, 2, (7, 7), (3, 3), (7, 7), rule=timm_rule).eval()
    b = SwinBlock(16, 2, (7, 7), (3, 3), (7, 7), rule=tv_rule).eval()
    b.load_state_dict(a.state_dict())
    x = torch.randn(1, 6, 8, 16)
    with torch.no_grad():
        assert (a(x) - b(x)).abs().max() > 1e-3


def test_timm_rule_shrinks_the_window_to_a_small_stage():
    block = SwinBlock(8, 2, (7, 7), (3, 3), resolution=(4, 5), rule=TimmWindows())
    assert block.window_size == (4, 5) and block.shift_size == (0, 0)
    assert block.attn.relative_position_bias_table.shape == (7 * 9, 2)
    assert block(torch.randn(1, 4, 5, 8)).shape == (1, 4, 5, 8)


def test_standalone_block_any_size_and_gradients():
    block = SwinBlock(8, 2, (4, 4), (2, 2))  # no configured resolution: window and shift as given
    x = torch.randn(2, 9, 13, 8, requires_grad=True)
    out = block(x)
    assert out.shape == x.shape
    out.sum().backward()
    assert x.grad.abs().sum() > 0
    assert all(p.grad is not None for p in block.parameters())
    assert not list(block.buffers())
