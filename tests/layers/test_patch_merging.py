"""Patch merging equals timm's and torchvision's with the same weights, pads odd sizes, runs in NHWC."""
from __future__ import annotations

import pytest
import torch
import torchvision.models.swin_transformer as tv_swin
from timm.models.swin_transformer import PatchMerging as TimmPatchMerging

from vision_attn.layers import PatchMerging


@pytest.mark.parametrize("size", [(8, 8), (7, 9), (1, 1)])
def test_like_timm_and_torchvision(size):
    ours = PatchMerging(6).eval()
    timm_pm = TimmPatchMerging(6).eval()
    tv_pm = tv_swin.PatchMerging(6).eval()
    timm_pm.load_state_dict(ours.state_dict())
    tv_pm.load_state_dict(ours.state_dict())
    x = torch.randn(2, *size, 6)
    with torch.no_grad():
        out = ours(x)
        assert out.shape == (2, -(-size[0] // 2), -(-size[1] // 2), 12)
        torch.testing.assert_close(out, timm_pm(x), atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(out, tv_pm(x), atol=1e-6, rtol=1e-5)


def test_channel_order_and_keys():
    pm = PatchMerging(1, out_dim=3)
    assert set(pm.state_dict()) == {"norm.weight", "norm.bias", "reduction.weight"}
    assert pm.reduction.weight.shape == (3, 4)
    with torch.no_grad():
        pm.norm = torch.nn.Identity()
        pm.reduction.weight.copy_(torch.eye(4)[:3])
    x = torch.arange(4.0).view(1, 2, 2, 1)  # [[0, 1], [2, 3]]
    out = pm(x)
    # (row, column) offsets (0,0), (1,0), (0,1): values 0, 2, 1
    assert out.flatten().tolist() == [0.0, 2.0, 1.0]


def test_gradients_flow():
    pm = PatchMerging(4)
    x = torch.randn(1, 5, 5, 4, requires_grad=True)
    pm(x).sum().backward()
    assert x.grad.abs().sum() > 0
    assert all(p.grad is not None for p in pm.parameters())
