"""FLOP counting: the published figures, the fused-attention formulas, meta vs real tensors."""
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, flop_registry

import vision_attn
from vision_attn.kernels import accelerate
from tests.peers import import_ultralytics
from vision_attn.analysis import FUSED_ATTENTION_FORMULAS, count_flops, count_model_flops, flop_counter
from vision_attn.analysis.flops import SAMPLING_FORMULAS
from vision_attn.errors import ConfigError, DataError
from vision_attn.layers import MultiScaleDeformableAttention
from vision_attn.models import VisionTransformer

aten = torch.ops.aten


def vit_macs(tokens: int, patches: int, dim: int, depth: int, patch: int, classes: int = 1000,
             heads: int = 1, batch: int = 1, chans: int = 3) -> int:
    """MACs of a ViT forward pass by hand: per block qkv 3ND², proj ND², MLP 8ND², attention 2N²D."""
    block = 12 * tokens * dim * dim + 2 * tokens * tokens * dim
    return batch * (depth * block + patches * dim * chans * patch * patch + heads * dim * classes)


# GMACs at 224, batch 1: DeiT paper / timm figures and PEER_FACTS (fvcore on non-fused models)
@pytest.mark.parametrize("name, gmacs, params", [
    ("deit_tiny_patch16_224", 1.26, 5_717_416),
    ("deit_small_patch16_224", 4.60, 22_050_664),
    ("deit_base_patch16_224", 17.56, 86_567_656),
    ("vit_small_patch16_224", 4.60, 22_050_664),
    ("vit_base_patch16_224", 17.58, 86_567_656),
    ("deit_small_distilled_patch16_224", 4.62, 22_436_432),
])
def test_published_figures(name, gmacs, params):
    report = count_model_flops(name)
    assert report.device == "meta"
    assert report.input_shape == (1, 3, 224, 224)
    assert report.gmacs == pytest.approx(gmacs, rel=0.01)
    assert report.params == params
    assert report.flops == 2 * report.macs


@pytest.mark.parametrize("img_size, batch", [(224, 1), ((224, 320), 1), (160, 3)])
def test_matches_hand_count(img_size, batch):
    h, w = (img_size, img_size) if isinstance(img_size, int) else img_size
    patches = (h // 16) * (w // 16)
    report = count_model_flops("deit_tiny_distilled_patch16_224", img_size, batch)
    assert report.input_shape == (batch, 3, h, w)
    assert report.macs == vit_macs(patches + 2, patches, 192, 12, 16, heads=2, batch=batch)
    assert report.fused_attention_macs == batch * 12 * 2 * (patches + 2) ** 2 * 192
    assert report.params == 5_910_800  # the variant keeps its parameters at any input size


@pytest.mark.parametrize("img_size", [224, (160, 288)])
def test_dinov3_rotary_vit_is_the_hand_count_over_its_registers(img_size):
    """The rotary embedding is element-wise (no MACs): DINOv3 ViT-S/16 counts as a ViT over the class
    token, 4 registers and the patches, without a head, at any size."""
    h, w = (img_size, img_size) if isinstance(img_size, int) else img_size
    patches = (h // 16) * (w // 16)
    report = count_model_flops("vit_small_patch16_dinov3", img_size)
    assert report.macs == vit_macs(patches + 5, patches, 384, 12, 16, heads=0)
    assert report.params == 21_586_944


def test_convnext_tiny_is_timms_published_figure():
    report = count_model_flops("convnext_tiny")
    assert report.gmacs == pytest.approx(4.47, rel=0.01) and report.params == 28_589_128


def test_timm_fused_attention_is_counted():
    timm = pytest.importorskip("timm")
    peer = timm.create_model("vit_small_patch16_224").eval()  # fused SDPA on the CPU, real tensors
    ours = count_model_flops("vit_small_patch16_224")
    report = count_flops(peer)
    assert report.device == "cpu"
    assert report.macs == ours.macs
    assert report.gmacs == pytest.approx(4.60, rel=0.005)
    assert str(aten._scaled_dot_product_flash_attention_for_cpu) in report.by_op
    # without our formulas torch's counter misses the attention products
    assert aten._scaled_dot_product_flash_attention_for_cpu not in flop_registry, "torch counts it now"
    with torch.no_grad(), FlopCounterMode(display=False) as plain:
        peer(torch.zeros(1, 3, 224, 224))
    assert plain.get_total_flops() // 2 == report.macs_without_fused_attention
    assert report.macs_without_fused_attention / 1e9 == pytest.approx(4.24, rel=0.005)
    assert ours.macs_without_fused_attention == report.macs_without_fused_attention


def test_meta_count_equals_real_count():
    real = vision_attn.create_model("vit_tiny_patch16_224").train()
    on_cpu = count_flops(real, name="vit_tiny_patch16_224")
    on_meta = count_model_flops("vit_tiny_patch16_224")
    assert (on_cpu.device, on_meta.device) == ("cpu", "meta")
    for field in ("macs", "params", "fused_attention_macs", "by_module", "by_op", "input_shape", "model"):
        assert getattr(on_cpu, field) == getattr(on_meta, field), field
    assert real.training, "count_flops restores the training mode"
    assert count_model_flops(real).macs == on_cpu.macs  # an instance is counted as it is


def test_batch_scales_linearly():
    one = count_model_flops("deit_small_patch16_224")
    four = count_model_flops("deit_small_patch16_224", batch=4)
    assert four.macs == 4 * one.macs
    assert four.fused_attention_macs == 4 * one.fused_attention_macs
    assert four.params == one.params
    assert four.input_shape == (4, 3, 224, 224)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_module_breakdown_sums_to_total(depth):
    report = count_model_flops("deit_small_distilled_patch16_224", depth=depth)
    assert sum(report.by_module.values()) == report.macs
    assert sum(report.by_op.values()) == report.macs
    assert "(other)" not in report.by_module  # a ViT's own forward does no counted arithmetic
    assert all(name.count(".") < depth for name in report.by_module)
    if depth == 2:
        assert list(report.by_module)[0] == "patch_embed.proj"  # order of execution
        assert {"blocks.0", "blocks.11", "head", "head_dist"} <= set(report.by_module)
        assert report.by_module["head"] == 384 * 1000


def test_by_module_other_holds_work_outside_submodules():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(x.flatten(1)) @ torch.ones(4, 2)

    report = count_flops(Net(), (2, 2, 2))
    assert report.by_module == {"fc": 8 * 4, "(other)": 4 * 2}
    assert report.macs == 8 * 4 + 4 * 2


def test_training_step_counts_the_fused_backward():
    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10)
    x = torch.randn(3, 3, 32, 32)
    with flop_counter() as counter:
        model(x).sum().backward()
    counts = counter.get_flop_counts()["Global"]
    b, h, n, d = 3, 4, 17, 16
    assert counts[aten._scaled_dot_product_flash_attention_for_cpu] == 2 * 2 * (2 * b * h * n * n * d)
    # backward: recomputed scores and four products, 2 FLOPs per MAC, two layers
    assert counts[aten._scaled_dot_product_flash_attention_for_cpu_backward] == 2 * 5 * (2 * b * h * n * n * d)


def test_torchvision_fast_path_is_counted():
    """nn.MultiheadAttention in eval runs aten._native_multi_head_attention, which torch skips."""
    from torchvision.models.vision_transformer import VisionTransformer as TVViT

    peer = TVViT(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=256).eval()
    ours = VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4)
    report = count_flops(peer, 32)
    assert str(aten._native_multi_head_attention) in report.by_op
    assert report.macs == count_flops(ours, 32).macs
    with torch.no_grad(), FlopCounterMode(display=False) as plain:
        peer(torch.zeros(1, 3, 32, 32))
    assert plain.get_total_flops() // 2 == report.macs_without_fused_attention < report.macs


class _SDPA(nn.Module):
    """SDPA with a boolean mask and grouped-query heads: q (B, 4, N, d), k and v (B, 2, N, d)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("anchor", torch.zeros(()))  # tells count_flops the device

    def forward(self, x):  # x: (B, 1, N, 32)
        x = x.squeeze(1)
        B, N, _ = x.shape
        q = x.reshape(B, N, 4, 8).transpose(1, 2)
        kv = x[..., :16].reshape(B, N, 2, 8).transpose(1, 2)
        mask = torch.ones(N, N, dtype=torch.bool, device=x.device).tril()
        return F.scaled_dot_product_attention(q, kv, kv, attn_mask=mask, enable_gqa=True)


def test_meta_sdpa_with_mask_and_gqa_counts_as_cpu():
    shape = (1, 5, 32)  # (C, H, W): count_flops adds the batch
    on_cpu, on_meta = count_flops(_SDPA(), shape, 2), count_flops(_SDPA().to("meta"), shape, 2)
    assert on_cpu.device == "cpu" and on_meta.device == "meta"
    assert on_meta.macs == on_cpu.macs == 2 * (2 * 4 * 5 * 5 * 8)
    assert on_meta.fused_attention_macs == on_cpu.fused_attention_macs == on_cpu.macs  # the fused kernel ran


def test_mapping_is_local_to_our_counter():
    assert not set(FUSED_ATTENTION_FORMULAS) & set(flop_registry)


def test_report_to_dict_is_json():
    d = json.loads(json.dumps(count_model_flops("vit_tiny_patch16_224").to_dict()))
    assert d["flops"] == 2 * d["macs"]
    assert d["macs_without_fused_attention"] == d["macs"] - d["fused_attention_macs"]
    assert d["input_shape"] == [1, 3, 224, 224]


def test_bad_arguments():
    with pytest.raises(ConfigError, match="did you mean"):
        count_model_flops("vit_tiny_patch16")
    with pytest.raises(ConfigError, match="batch"):
        count_model_flops("vit_tiny_patch16_224", batch=0)
    with pytest.raises(ConfigError, match="input_size"):
        count_model_flops("vit_tiny_patch16_224", (1, 3, 224, 224))
    with pytest.raises(DataError, match="divisible"):
        count_model_flops("vit_tiny_patch16_224", 225)


def test_onednn_inference_linear_is_counted_by_flop_counter():
    """At inference on the CPU our linear layers run oneDNN's fused op; a counter around any
    computation still counts them, and count_flops reports the same as the standard path."""
    model = accelerate(vision_attn.create_model("vit_tiny_patch16_224", depth=2)).eval()
    with torch.no_grad(), flop_counter() as counter:
        model(torch.zeros(1, 3, 224, 224))
    ops = {str(op) for op in counter.get_flop_counts()["Global"]}
    assert "mkldnn._linear_pointwise" in ops  # the fast path ran (the head is a plain nn.Linear: addmm)
    assert counter.get_total_flops() // 2 == count_flops(model).macs


def test_deformable_attention_counts_its_sampling():
    """The layer's count equals docs/flops.md's formula, on real and meta tensors, and equals
    ultralytics' MSDeformAttn's (grid_sample, counted by our formula; torch's counter reads it as 0)."""
    B, Q, D, H, L, P = 2, 30, 64, 4, 3, 2
    levels = [(8, 6), (4, 3), (2, 2)]
    S = sum(h * w for h, w in levels)
    sampling = 4 * B * Q * D * L * P  # 4 neighbours per sampled value and channel
    formula = B * S * D * D + B * Q * D * (2 * H * L * P) + B * Q * D * (H * L * P) + sampling + B * Q * D * D
    peer = import_ultralytics("ultralytics.nn.modules.transformer").MSDeformAttn(D, L, H, P)
    counts = {}
    for name, device in (("ours", "cpu"), ("ours", "meta"), ("ultralytics", "cpu")):
        with torch.device(device):
            layer = MultiScaleDeformableAttention(D, L, H, P) if name == "ours" else peer
            args = (torch.randn(B, Q, D), torch.rand(B, Q, 1, 4), torch.randn(B, S, D), levels)
        with torch.no_grad(), flop_counter() as counter:
            layer(*args)
        counts[name, device] = counter.get_total_flops() // 2
    assert counts == {("ours", "cpu"): formula, ("ours", "meta"): formula, ("ultralytics", "cpu"): formula}
    assert aten.grid_sampler_2d in SAMPLING_FORMULAS
    assert aten.grid_sampler_2d not in flop_registry, "torch counts it now"
    with torch.no_grad(), FlopCounterMode(display=False) as plain:
        peer(*args)
    assert plain.get_total_flops() // 2 == formula - sampling  # without our formula the sampling is missed
