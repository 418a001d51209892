"""IdentityBlend: the exact identity at the start; the block learns once the scale moves."""
from __future__ import annotations

import torch

from vision_attn.layers.plugins import CBAM, IdentityBlend


def test_exact_identity_at_start_and_learning_after_a_step():
    blend = IdentityBlend(CBAM(16))
    x = torch.randn(2, 16, 5, 5)
    assert torch.equal(blend(x), x)
    assert torch.equal(blend.to(torch.bfloat16)(x.bfloat16()), x.bfloat16())
    blend = blend.float()
    opt = torch.optim.SGD(blend.parameters(), lr=0.1)
    target = torch.randn_like(x)
    for step in range(2):
        opt.zero_grad()
        ((blend(x) - target) ** 2).mean().backward()
        if step == 0:
            assert blend.scale.grad.abs() > 0
            assert all(p.grad is None or p.grad.abs().sum() == 0 for p in blend.block.parameters())
        else:
            assert blend.block.channel.fc1.weight.grad.abs().sum() > 0
        opt.step()
    assert blend.scale.item() != 0
    assert not torch.equal(blend(x), x)


def test_keys():
    keys = set(IdentityBlend(CBAM(16)).state_dict())
    assert "scale" in keys and "block.channel.fc1.weight" in keys
