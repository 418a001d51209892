"""Patch embedding: NHWC token grids, clear errors for wrong images, optional padding."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vision_attn import ConfigError, DataError
from vision_attn.layers import PatchEmbed, to_2tuple


def test_shape_is_nhwc_and_equals_strided_conv():
    pe = PatchEmbed(img_size=64, patch_size=16, in_chans=3, embed_dim=32)
    assert pe.grid_size == (4, 4) and pe.num_patches == 16
    x = torch.randn(2, 3, 64, 96)  # another size that is a patch multiple also runs
    out = pe(x)
    assert out.shape == (2, 4, 6, 32)
    # token (i, j) is the projection of the image patch at rows 16i.., columns 16j..
    patch = x[:, :, 16:32, 48:64].reshape(2, -1)  # (B, 3*16*16)
    expected = patch @ pe.proj.weight.reshape(32, -1).T + pe.proj.bias
    torch.testing.assert_close(out[:, 1, 3], expected, atol=1e-4, rtol=1e-4)


def test_rectangular_patch_and_image():
    pe = PatchEmbed(img_size=(32, 48), patch_size=(8, 16), embed_dim=8)
    assert pe.grid_size == (4, 3)
    assert pe(torch.randn(1, 3, 32, 48)).shape == (1, 4, 3, 8)


def test_wrong_channel_count():
    pe = PatchEmbed(img_size=32, patch_size=16, embed_dim=8)
    with pytest.raises(DataError, match="channels") as info:
        pe(torch.randn(1, 1, 32, 32))
    assert "convert the images to 3 channels" in str(info.value)
    assert "(1, 1, 32, 32)" in str(info.value)


def test_not_a_batch_of_images():
    pe = PatchEmbed(img_size=32, patch_size=16, embed_dim=8)
    with pytest.raises(DataError, match="channels"):
        pe(torch.randn(3, 32, 32))


def test_image_not_divisible():
    pe = PatchEmbed(img_size=224, patch_size=16, embed_dim=8)
    with pytest.raises(DataError, match="divisible") as info:
        pe(torch.randn(1, 3, 225, 224))
    assert "225x224" in str(info.value)


def test_img_size_not_divisible_at_construction():
    with pytest.raises(ConfigError, match="not divisible by patch_size"):
        PatchEmbed(img_size=225, patch_size=16)


def test_dynamic_pad_pads_bottom_right_with_zeros():
    pe = PatchEmbed(img_size=224, patch_size=16, embed_dim=8, dynamic_pad=True)
    x = torch.randn(1, 3, 225, 225)
    out = pe(x)
    assert out.shape == (1, 15, 15, 8)
    padded = F.pad(x, (0, 15, 0, 15))  # 225 -> 240 with zeros on the bottom and right
    assert padded.shape[-2:] == (240, 240)
    expected = pe.proj(padded).permute(0, 2, 3, 1)
    torch.testing.assert_close(out, expected)
    # a configured size that is not a multiple is allowed with padding and rounds the grid up
    assert PatchEmbed(img_size=225, patch_size=16, dynamic_pad=True).grid_size == (15, 15)


def test_to_2tuple():
    assert to_2tuple(7) == (7, 7)
    assert to_2tuple([3, 5]) == (3, 5)
    with pytest.raises(ConfigError, match="pair"):
        to_2tuple((1, 2, 3))
