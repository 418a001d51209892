"""Swin numbers against timm, torchvision and the official layout: peer weights in through
``create_model(..., pretrained=file)``, same logits out (float32, max abs difference <= 1e-4)."""
from __future__ import annotations

import re

import pytest
import timm
import torch
import torchvision
from timm.models.swin_transformer import checkpoint_filter_fn

import vision_attn
from vision_attn.layers import region_mask, relative_position_index
from vision_attn.models.swin import timm_to_torchvision

ATOL = 1e-4


def assert_close(a: torch.Tensor, b: torch.Tensor, atol: float = ATOL) -> None:
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = (a - b).abs().max().item()
    assert diff <= atol, f"max abs diff {diff:.3g} > {atol}"


def randomise(model: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial values in every parameter (biases, norms and the zero-initialised tables included),
    so that a weight that fails to load shows in the logits."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=0.02 if p.ndim > 1 else 0.1)
    return model


@pytest.fixture(scope="module")
def timm_tiny():
    torch.manual_seed(1)
    return randomise(timm.create_model("swin_tiny_patch4_window7_224", strict_img_size=False)).eval()


@pytest.fixture(scope="module")
def timm_file(timm_tiny, tmp_path_factory):
    path = tmp_path_factory.mktemp("swin") / "timm_swin_tiny.pth"
    torch.save(timm_tiny.state_dict(), path)
    return path


@pytest.fixture(scope="module")
def ours_from_timm(timm_file):
    return vision_attn.create_model("swin_tiny_patch4_window7_224", pretrained=timm_file).eval()


def test_timm_weights_same_logits(timm_tiny, ours_from_timm):
    for size in [(224, 224), (192, 256)]:  # timm with strict_img_size=False at the non-square size
        x = torch.randn(1, 3, *size)
        with torch.no_grad():
            assert_close(ours_from_timm(x), timm_tiny(x))


def test_torchvision_weights_same_logits(tmp_path):
    torch.manual_seed(2)
    tv_tiny = randomise(torchvision.models.swin_t(weights=None)).eval()
    path = tmp_path / "tv.pth"
    torch.save(tv_tiny.state_dict(), path)
    ours = vision_attn.create_model("swin_t", pretrained=path).eval()
    for size in [(224, 224), (192, 256)]:
        x = torch.randn(1, 3, *size)
        with torch.no_grad():
            assert_close(ours(x), tv_tiny(x))
    # and back into torchvision
    back = torchvision.models.swin_t(weights=None).eval()
    missing, unexpected = back.load_state_dict(timm_to_torchvision(ours.state_dict()), strict=False)
    assert not unexpected and all(k.endswith("relative_position_index") for k in missing)
    with torch.no_grad():
        assert_close(back(x), tv_tiny(x))


def test_the_two_rules_differ_at_192x256_and_agree_at_224(timm_file, ours_from_timm):
    """Same weights: timm's and torchvision's rules agree at the configured size and not at 192x256,
    which is why each name follows its own peer."""
    tv_rule = vision_attn.create_model("swin_tiny_patch4_window7_224", pretrained=timm_file,
                                       window_rule="torchvision").eval()
    with torch.no_grad():
        x = torch.randn(1, 3, 224, 224)
        assert_close(ours_from_timm(x), tv_rule(x))
        x = torch.randn(1, 3, 192, 256)
        assert (ours_from_timm(x) - tv_rule(x)).abs().max() > 1e-3


# Our (timm's) layout -> the official Microsoft layout (github.com/microsoft/Swin-Transformer,
# models/swin_transformer.py), written here independently of vision_attn.models.swin.official_to_timm:
#   layers.{i}.downsample.*   (merging at the START of stage i, i >= 1) -> layers.{i-1}.downsample.*
#   head.fc.weight / head.fc.bias                                      -> head.weight / head.bias
#   every block gains attn.relative_position_index (N, N) int64, a persistent buffer there;
#   shifted blocks of stages larger than the window gain attn_mask (nW, N, N), also persistent.
def to_official(state: dict, window: int = 7, grid: int = 56) -> dict:
    out = {}
    for key, value in state.items():
        m = re.match(r"layers\.(\d+)\.downsample\.(.+)", key)
        if m:
            key = f"layers.{int(m.group(1)) - 1}.downsample.{m.group(2)}"
        elif key.startswith("head.fc."):
            key = "head." + key[len("head.fc."):]
        out[key] = value
        m = re.match(r"layers\.(\d+)\.blocks\.(\d+)\.attn\.relative_position_bias_table", key)
        if m:
            stage, block = int(m.group(1)), int(m.group(2))
            prefix = f"layers.{stage}.blocks.{block}."
            out[prefix + "attn.relative_position_index"] = relative_position_index((window, window))
            res = grid // 2**stage
            if block % 2 == 1 and res > window:
                out[prefix + "attn_mask"] = region_mask((res, res), (window, window), (window // 2,) * 2)
    return out


def test_official_layout_same_logits(tmp_path, timm_tiny):
    official = to_official(timm_tiny.state_dict())
    assert "layers.0.downsample.reduction.weight" in official and "head.weight" in official
    assert "layers.0.blocks.1.attn_mask" in official and "layers.3.blocks.1.attn_mask" not in official
    path = tmp_path / "swin_tiny_patch4_window7_224.pth"
    torch.save({"model": official}, path)  # the official train script's container
    ours = vision_attn.create_model("swin_tiny_patch4_window7_224", pretrained=path).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert_close(ours(x), timm_tiny(x))
    # timm reads the same file the same way
    peer = timm.create_model("swin_tiny_patch4_window7_224").eval()
    peer.load_state_dict(checkpoint_filter_fn(official, peer))
    with torch.no_grad():
        assert_close(peer(x), timm_tiny(x))


@pytest.mark.parametrize("target, size, table", [
    (dict(img_size=384, window_size=12), 384, (23 * 23, 1)),  # another window: every table resampled
    (dict(img_size=112), 112, (7 * 7, 8)),  # another resolution: the last stage (4x4) shrinks its window
])
def test_window_or_resolution_change_resamples_the_bias_tables_like_timm(tmp_path, target, size, table):
    """A window-7 file at 224 into a model of another window or resolution: the tables are resampled
    as timm resamples them, and the logits agree."""
    small = dict(depths=(1, 1, 2, 1), embed_dim=32, num_heads=(1, 2, 4, 8))
    torch.manual_seed(3)
    src = randomise(timm.create_model("swin_tiny_patch4_window7_224", **small))
    path = tmp_path / "w7.pth"
    torch.save(src.state_dict(), path)
    ours = vision_attn.create_model("swin_tiny_patch4_window7_224", pretrained=path, **target, **small).eval()
    stage = 0 if "window_size" in target else 3
    assert ours.layers[stage].blocks[0].attn.relative_position_bias_table.shape == table
    peer = timm.create_model("swin_tiny_patch4_window7_224", **target, **small).eval()
    peer.load_state_dict(checkpoint_filter_fn(src.state_dict(), peer))
    x = torch.randn(1, 3, size, size)
    with torch.no_grad():
        assert_close(ours(x), peer(x))


def test_forward_intermediates_like_timm(timm_tiny, ours_from_timm):
    x = torch.randn(1, 3, 192, 256)
    with torch.no_grad():
        got = ours_from_timm.forward_intermediates(x, indices=[0, 1, 2, 3], norm=True, intermediates_only=True)
        want = timm_tiny.forward_intermediates(x, indices=[0, 1, 2, 3], norm=True, intermediates_only=True)
    assert [g.shape[-2:] for g in got] == [(48, 64), (24, 32), (12, 16), (6, 8)]
    for a, b in zip(got, want):
        assert_close(a, b)
