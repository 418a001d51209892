"""Swin V2 against timm, torchvision and the official layout: peer weights in through
``create_model(..., pretrained=file)``, the same logits out (float32, max abs difference <= 1e-4);
parameter counts, published GMACs, one fused attention call per block, any input size, stage maps."""
from __future__ import annotations

import json
import re

import pytest
import timm
import torch
import torch.nn.functional as F
import torchvision
from timm.models.swin_transformer_v2 import checkpoint_filter_fn
from torch.overrides import TorchFunctionMode

import vision_attn
from vision_attn.kernels import accelerate
from vision_attn.analysis.flops import count_model_flops
from vision_attn.layers import CosineWindowAttention, record_attention, region_mask, relative_position_index
from vision_attn.layers.cosine_window_attention import log_spaced_coords
from vision_attn.models.swin import timm_to_torchvision
from vision_attn.models.swin_v2 import SwinTransformerV2

from .test_swin_parity import to_official as to_official_v1

ATOL = 1e-4
TIMM_NAMES = ["swinv2_tiny_window8_256", "swinv2_tiny_window16_256", "swinv2_small_window8_256",
              "swinv2_small_window16_256", "swinv2_base_window8_256", "swinv2_base_window16_256",
              "swinv2_base_window12to16_192to256", "swinv2_base_window12to24_192to384"]
TV_NAMES = ["swin_v2_t", "swin_v2_s", "swin_v2_b"]
NARROW = dict(depths=(1, 2, 2, 1), embed_dim=32, num_heads=(1, 2, 4, 8))


def assert_close(a: torch.Tensor, b: torch.Tensor, atol: float = ATOL) -> None:
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = (a - b).abs().max().item()
    assert diff <= atol, f"max abs diff {diff:.3g} > {atol}"


def randomise(model: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial values in every parameter: Swin V2 starts its post-norms at zero, which would hide
    every attention and MLP weight from the logits."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=0.02 if p.ndim > 1 else 0.1)
    return model


def save(model: torch.nn.Module, path) -> str:
    torch.save(model.state_dict(), path)
    return str(path)


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def timm_tiny():
    """swinv2_tiny_window8_256 at its own size (256 px, four stages of 8x8 windows), narrow and shallow."""
    torch.manual_seed(1)
    return randomise(timm.create_model("swinv2_tiny_window8_256", strict_img_size=False, **NARROW)).eval()


@pytest.fixture(scope="module")
def timm_file(timm_tiny, tmp_path_factory):
    return save(timm_tiny, tmp_path_factory.mktemp("swinv2") / "timm_swinv2_tiny.pth")


@pytest.fixture(scope="module")
def ours_tiny(timm_file):
    return vision_attn.create_model("swinv2_tiny_window8_256", pretrained=timm_file, **NARROW).eval()


# ------------------------------------------------------------------------------------ the names
@pytest.mark.parametrize("name", TIMM_NAMES + TV_NAMES)
def test_parameter_counts_equal_the_peers(name):
    with torch.device("meta"):
        ours = vision_attn.create_model(name)
        peer = timm.create_model(name) if name in TIMM_NAMES else torchvision.models.get_model(name, weights=None)
    assert isinstance(ours, SwinTransformerV2)
    assert n_params(ours) == n_params(peer)
    # the state dict holds parameters only: coordinate tables, indices and masks are computed
    assert set(ours.state_dict()) == {k for k, _ in ours.named_parameters()}


def test_exact_counts_and_the_torchvision_key_bias():
    """torchvision keeps a full qkv.bias whose key third it never uses: C more parameters a block."""
    with torch.device("meta"):
        timm_t, tv_t = vision_attn.create_model("swinv2_tiny_window8_256"), vision_attn.create_model("swin_v2_t")
    assert n_params(timm_t) == 28_347_154
    assert n_params(tv_t) == 28_351_570 == n_params(timm_t) + sum(96 * 2**i * d for i, d in enumerate((2, 2, 6, 2)))


@pytest.mark.parametrize("name, gmacs", [("swinv2_tiny_window8_256", 5.96), ("swin_v2_t", 5.94)])
def test_published_gmacs(name, gmacs):
    report = count_model_flops(name)
    assert report.input_shape == (1, 3, 256, 256)
    assert report.gmacs == pytest.approx(gmacs, rel=0.01)
    assert report.fused_attention_macs > 0


# ------------------------------------------------------------------------------------ parity
def test_timm_weights_same_logits(timm_tiny, ours_tiny):
    for size in [(256, 256), (192, 256)]:  # timm with strict_img_size=False at the non-square size
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            assert_close(ours_tiny(x), timm_tiny(x))
    assert [len(s.blocks) for s in ours_tiny.layers] == [1, 2, 2, 1]


@pytest.mark.parametrize("name, img", [("swinv2_tiny_window16_256", 256), ("swinv2_base_window12to24_192to384", 192)])
def test_other_windows_and_pretrained_window_sizes_like_timm(tmp_path, name, img):
    """16x16 windows (the last two stages shrink theirs to the map) and 24x24 windows whose bias MLP
    was trained at 12x12 (the coordinates scaled by the pretrained window)."""
    torch.manual_seed(4)
    peer = randomise(timm.create_model(name, img_size=img, strict_img_size=False, **NARROW)).eval()
    ours = vision_attn.create_model(name, img_size=img, pretrained=save(peer, tmp_path / "w.pth"), **NARROW).eval()
    for block, theirs in zip([b for s in ours.layers for b in s.blocks], [b for s in peer.layers for b in s.blocks]):
        assert (block.window_size, block.shift_size) == (theirs.window_size, theirs.shift_size)
        assert block.attn.pretrained_window_size == theirs.attn.pretrained_window_size
    for size in [(img, img), (img - 64, img)]:
        x = torch.randn(1, 3, *size)
        with torch.no_grad():
            assert_close(ours(x), peer(x))


def test_log_spaced_coordinates_equal_timm():
    attn = timm.models.swin_transformer_v2.WindowAttention(16, (8, 8), 2, pretrained_window_size=(6, 6))
    ours = log_spaced_coords((8, 8), (6, 6))
    assert torch.allclose(ours, attn.relative_coords_table.reshape(-1, 2), atol=1e-6)


def tv_swin_v2_t(depths, embed_dim, num_heads) -> torch.nn.Module:
    """torchvision's swin_v2_t (its V2 block and merging, 4x4 patches, 8x8 windows, stochastic depth
    0.2), narrowed: torchvision.models.swin_v2_t takes no width or depth arguments."""
    from torchvision.models.swin_transformer import PatchMergingV2, SwinTransformer, SwinTransformerBlockV2

    return SwinTransformer(patch_size=[4, 4], embed_dim=embed_dim, depths=list(depths), num_heads=list(num_heads),
                           window_size=[8, 8], stochastic_depth_prob=0.2, block=SwinTransformerBlockV2,
                           downsample_layer=PatchMergingV2)


def test_torchvision_builder_is_swin_v2_t():
    with torch.device("meta"):
        assert n_params(tv_swin_v2_t((2, 2, 6, 2), 96, (3, 6, 12, 24))) == n_params(torchvision.models.swin_v2_t())


def test_torchvision_weights_same_logits_and_round_trip(tmp_path):
    torch.manual_seed(2)
    tv = randomise(tv_swin_v2_t(**NARROW)).eval()
    ours = vision_attn.create_model("swin_v2_t", pretrained=save(tv, tmp_path / "tv.pth"), **NARROW).eval()
    for size in [(256, 256), (192, 256)]:
        x = torch.randn(1, 3, *size)
        with torch.no_grad():
            assert_close(ours(x), tv(x))
    back = tv_swin_v2_t(**NARROW).eval()
    missing, unexpected = back.load_state_dict(timm_to_torchvision(ours.state_dict()), strict=False)
    assert not unexpected and all(k.endswith(("relative_position_index", "relative_coords_table")) for k in missing)
    with torch.no_grad():
        assert_close(back(x), tv(x))


def test_timm_and_torchvision_files_load_into_either_attention_layout(tmp_path, timm_file, timm_tiny):
    """A timm file (q_bias, v_bias) into torchvision's names (one qkv.bias) and back: the same logits at
    256 px, where the two window rules agree."""
    tv_named = vision_attn.create_model("swin_v2_t", pretrained=timm_file, **NARROW).eval()
    assert tuple(tv_named.layers[0].blocks[0].attn.qkv.bias.shape) == (3 * 32,)
    x = torch.randn(1, 3, 256, 256)
    with torch.no_grad():
        assert_close(tv_named(x), timm_tiny(x))
    timm_named = vision_attn.create_model("swinv2_tiny_window8_256", pretrained=save(tv_named, tmp_path / "t.pth"), **NARROW)
    with torch.no_grad():
        assert_close(timm_named.eval()(x), timm_tiny(x))


# Our (timm's) layout -> the official one (github.com/microsoft/Swin-Transformer,
# models/swin_transformer_v2.py), written independently of vision_attn.models.swin.official_to_timm:
# Swin V1's renames (test_swin_parity.to_official: merging moved to the end of the previous stage,
# head.fc -> head), and every block gains attn.relative_coords_table (1, 2wh-1, 2ww-1, 2) and
# attn.relative_position_index (N, N), shifted blocks attn_mask (nW, N, N): buffers the official code saves.
def to_official(state: dict, window: int = 8, grid: int = 64) -> dict:
    out = to_official_v1(state)
    for key in list(out):
        m = re.match(r"layers\.(\d+)\.blocks\.(\d+)\.attn\.logit_scale", key)
        if m:
            stage, block = int(m.group(1)), int(m.group(2))
            prefix = f"layers.{stage}.blocks.{block}."
            res = grid // 2**stage
            w = min(window, res)
            out[prefix + "attn.relative_coords_table"] = log_spaced_coords((w, w)).view(1, 2 * w - 1, 2 * w - 1, 2)
            out[prefix + "attn.relative_position_index"] = relative_position_index((w, w))
            if block % 2 == 1 and res > window:
                out[prefix + "attn_mask"] = region_mask((res, res), (w, w), (w // 2,) * 2)
    return out


def test_official_layout_same_logits(tmp_path, timm_tiny):
    official = to_official(timm_tiny.state_dict())
    assert "layers.0.downsample.reduction.weight" in official and "head.weight" in official
    path = tmp_path / "swinv2_tiny_patch4_window8_256.pth"
    torch.save({"model": official}, path)  # the official train script's container
    x = torch.randn(1, 3, 256, 256)
    for name in ("swinv2_tiny_window8_256", "swin_v2_t"):  # recognised without being told, into either layout
        ours = vision_attn.create_model(name, pretrained=path, **NARROW).eval()
        with torch.no_grad():
            assert_close(ours(x), timm_tiny(x))
    peer = timm.create_model("swinv2_tiny_window8_256", **NARROW).eval()  # timm reads the same file the same way
    peer.load_state_dict(checkpoint_filter_fn(official, peer))
    with torch.no_grad():
        assert_close(peer(x), timm_tiny(x))


def test_forward_intermediates_like_timm(timm_tiny, ours_tiny):
    x = torch.randn(1, 3, 192, 256)
    with torch.no_grad():
        got = ours_tiny.forward_intermediates(x, indices=[0, 1, 2, 3], norm=True, intermediates_only=True)
        want = timm_tiny.forward_intermediates(x, indices=[0, 1, 2, 3], norm=True, intermediates_only=True)
    assert [g.shape[-2:] for g in got] == [(48, 64), (24, 32), (12, 16), (6, 8)]
    for g, w in zip(got, want):
        assert_close(g, w)


# ------------------------------------------------------------------------------------ the kernel
class _CountSdpa(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.scaled_dot_product_attention:
            self.calls += 1
        return func(*args, **(kwargs or {}))


def test_one_fused_attention_call_per_block_equal_to_the_explicit_weights():
    torch.manual_seed(5)
    model = randomise(vision_attn.create_model("swinv2_tiny_window8_256", img_size=128, **NARROW)).eval()
    x = torch.randn(2, 3, 128, 128)
    counter = _CountSdpa()
    with torch.no_grad(), counter:
        fused = model(x)
    assert counter.calls == sum(NARROW["depths"])
    with torch.no_grad(), record_attention(model) as maps:
        explicit = model(x)
    assert len(maps) == sum(NARROW["depths"])
    assert all(torch.allclose(m.sum(-1), torch.ones(())) for m in maps)  # softmax rows
    assert_close(fused, explicit)


def test_logit_scale_is_clamped_at_100():
    attn = CosineWindowAttention(16, 2, 4)
    with torch.no_grad():
        attn.logit_scale.fill_(10.0)  # exp(10) unclamped
    assert torch.allclose(attn.logit_scales(), torch.full((2,), 100.0))
    x = torch.randn(3, 16, 16)
    attn.keep_weights = True
    attn(x)
    q, k, _ = F.linear(x, attn.qkv.weight, attn.qkv_bias()).view(3, 16, 3, 2, 8).permute(2, 0, 3, 1, 4)
    logits = 100 * F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1) + attn.relative_position_bias()
    assert torch.allclose(attn.weights, logits.softmax(-1), atol=1e-5)


# ------------------------------------------------------------------------------------ training, sizes
@pytest.mark.parametrize("name", ["swinv2_tiny_window8_256", "swin_v2_t"])
def test_small_variant_trains_at_another_size(name):
    torch.manual_seed(6)
    model = randomise(vision_attn.create_model(name, img_size=128, num_classes=5, drop_path_rate=0.0, **NARROW)).train()
    out = model(torch.randn(2, 3, 136, 120))
    assert out.shape == (2, 5)
    out.square().sum().backward()
    for key, param in model.named_parameters():
        if key.endswith("attn.qkv.bias"):  # torchvision's key third is held but never used
            C = param.shape[0] // 3
            assert param.grad[C:2 * C].abs().sum() == 0 and param.grad[:C].abs().sum() > 0
            continue
        assert param.grad is not None and torch.isfinite(param.grad).all(), key
        assert param.grad.abs().sum() > 0, f"{key} got an all-zero gradient"


def test_fresh_model_starts_with_zero_post_norms_and_no_decay_on_the_bias_mlp():
    model = vision_attn.create_model("swinv2_tiny_window8_256", img_size=128, **NARROW)
    block = model.layers[1].blocks[0]
    assert block.norm1.weight.abs().sum() == 0 and block.norm2.bias.abs().sum() == 0
    assert torch.allclose(block.attn.logit_scale, torch.full_like(block.attn.logit_scale, 10.0).log())
    no_decay = model.no_weight_decay()
    assert "layers.1.blocks.0.attn.cpb_mlp.0.weight" in no_decay and "layers.1.blocks.0.attn.logit_scale" in no_decay
    assert "layers.1.blocks.0.attn.qkv.weight" not in no_decay


def test_pretrained_window_sizes_need_one_per_stage():
    with pytest.raises(vision_attn.ConfigError, match="pretrained_window_sizes"):
        vision_attn.create_model("swinv2_tiny_window8_256", pretrained_window_sizes=(8, 8))


def test_v1_file_into_v2_names_the_keys(tmp_path):
    v1 = vision_attn.create_model("swin_tiny_patch4_window7_224", **NARROW)
    with pytest.raises(vision_attn.CheckpointError, match="relative_position_bias_table"):
        vision_attn.create_model("swinv2_tiny_window8_256", pretrained=save(v1, tmp_path / "v1.pth"), **NARROW)


def test_flops_command_knows_swin_v2(capsys):
    from vision_attn.cli import main

    assert main(["flops", "swinv2_tiny_window8_256", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["params"] == 28_347_154 and d["input_shape"] == [1, 3, 256, 256]
    assert d["gmacs"] == pytest.approx(5.96, rel=0.01)


def test_attention_maps_of_each_stage():
    from vision_attn.analysis.attention_maps import attention_maps

    torch.manual_seed(11)
    model = randomise(vision_attn.create_model("swinv2_tiny_window8_256", img_size=128, **NARROW))
    maps = attention_maps(model, torch.randn(1, 3, 128, 96))
    assert maps.kind == "swin"
    assert [tuple(m.shape) for m in maps.maps.values()] == [(32, 24), (16, 12), (8, 6), (4, 3)]
    # mean attention received per token: the window's queries spread one unit over its 64 keys
    first = next(iter(maps.maps.values()))
    assert torch.allclose(first.reshape(4, 8, 3, 8).sum(dim=(1, 3)), torch.ones(4, 3), atol=1e-4)


def test_inference_bias_cache_follows_the_weights():
    """The bias computed at inference is reused, and recomputed after the MLP's weights change."""
    attn = accelerate(CosineWindowAttention(16, 2, 4)).eval()
    with torch.no_grad():
        first = attn.relative_position_bias()
        assert attn.relative_position_bias() is first
        attn.cpb_mlp[2].weight.mul_(2.0)  # in place, as an optimiser step or load_state_dict writes
        second = attn.relative_position_bias()
    assert second is not first and not torch.allclose(second, first)
    with torch.inference_mode():
        cached = attn.relative_position_bias()
    assert not cached.is_inference()  # usable by a later pass that records gradients
    assert attn.relative_position_bias().requires_grad  # with gradients on, computed afresh
