"""AdamW groups: which parameters decay, and layer-wise learning-rate scales; the fused optimizer step."""
import math

import pytest
import torch

from vision_attn import create_model
from vision_attn.optimizers import OPTIMIZERS
from vision_attn.tasks.classify.network import pretrained_normalisation
from vision_attn.tasks.optim import (build_optimizer, fused_step_applies, layer_ids, lightning_clips_under_autocast,
                                    param_groups)


def _names(groups, decay: bool) -> set[str]:
    return {n for g in groups if (g["weight_decay"] > 0) == decay for n in g["param_names"]}


def test_vit_no_decay_on_norms_biases_tokens_and_positions():
    model = create_model("deit_tiny_distilled_patch16_224", num_classes=3, img_size=16, patch_size=8, depth=2,
                         embed_dim=32, num_heads=2)
    groups = param_groups(model, weight_decay=0.05)
    no_decay = _names(groups, False)
    assert {"cls_token", "dist_token", "pos_embed", "norm.weight", "norm.bias", "blocks.0.norm1.weight",
            "blocks.0.attn.qkv.bias", "head.bias"} <= no_decay
    assert {"blocks.0.attn.qkv.weight", "patch_embed.proj.weight", "head.weight"} <= _names(groups, True)
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


def test_vit_layer_decay_scales():
    model = create_model("vit_tiny_patch16_224", num_classes=3, img_size=16, patch_size=8, depth=3, embed_dim=32,
                         num_heads=2)
    ids, n = layer_ids(model)
    assert n == 3 and ids("pos_embed") == 0 and ids("blocks.2.mlp.fc1.weight") == 3 and ids("head.weight") == 4
    groups = param_groups(model, weight_decay=0.05, layer_decay=0.5)
    scale = {n: g["lr_scale"] for g in groups for n in g["param_names"]}
    assert scale["head.weight"] == 1.0 and scale["blocks.2.attn.qkv.weight"] == 0.5
    assert scale["blocks.0.attn.qkv.weight"] == 0.125 and scale["patch_embed.proj.weight"] == 0.0625


def test_timm_scheduler_applies_lr_scale():
    from timm.scheduler import CosineLRScheduler

    model = create_model("vit_tiny_patch16_224", num_classes=3, img_size=16, patch_size=8, depth=1, embed_dim=32,
                         num_heads=2)
    opt = torch.optim.AdamW(param_groups(model, weight_decay=0.05, layer_decay=0.5), lr=1e-3)
    sched = CosineLRScheduler(opt, t_initial=10, warmup_t=2, warmup_lr_init=0.0, t_in_epochs=False)
    sched.step_update(num_updates=2)
    lrs = sorted({g["lr"] for g in opt.param_groups})  # cosine at step 2 of 10 (warmup over), times each scale
    peak = 1e-3 * 0.5 * (1 + math.cos(math.pi * 2 / 10))
    assert lrs == pytest.approx([0.25 * peak, 0.5 * peak, peak])


def test_swin_and_resnet_layer_ids():
    names = [n for n in __import__("vision_attn").list_models("swin_tiny*")]
    if names:
        swin = create_model(names[0], num_classes=3)
        ids, n = layer_ids(swin)
        assert n == 12 and ids("patch_embed.proj.weight") == 0 and ids("layers.3.blocks.1.attn.qkv.weight") == 12
        assert ids("head.fc.weight") == 13
    resnet = create_model("resnet18", num_classes=3)
    ids, n = layer_ids(resnet)
    assert n == 8 and ids("conv1.weight") == 0 and ids("layer4.1.conv2.weight") == 8 and ids("fc.weight") == 9
    no_decay = _names(param_groups(resnet, weight_decay=0.1), False)
    assert "bn1.weight" in no_decay and "fc.bias" in no_decay and "conv1.weight" not in no_decay


def _steps(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], grads: list[list[torch.Tensor]]) -> None:
    for step in grads:
        for p, g in zip(params, step):
            p.grad = g.clone()
        optimizer.step()


@pytest.mark.parametrize("name,hyper", [("adamw", {"lr": 1e-2, "betas": (0.9, 0.99)}),
                                        ("sgd", {"lr": 1e-2, "momentum": 0.937, "nesterov": True})])
def test_the_fused_step_updates_as_torchs_default_loop_does(name, hyper):
    gen = torch.Generator().manual_seed(0)
    shapes = [(17, 5), (5,), (3, 3, 2, 2)]  # odd sizes: the kernels' vector tails
    init = [torch.randn(s, generator=gen) for s in shapes]
    grads = [[torch.randn(s, generator=gen) for s in shapes] for _ in range(5)]

    def run(build):
        params = [torch.nn.Parameter(t.clone()) for t in init]
        groups = [{"params": params[:1], "weight_decay": 0.05, "lr_scale": 1.0},
                  {"params": params[1:], "weight_decay": 0.0, "lr_scale": 0.5}]
        optimizer = build(groups)
        _steps(optimizer, params, grads)
        return optimizer, params

    ours, fused = run(lambda groups: build_optimizer(name, groups, **hyper))
    _, reference = run(lambda groups: OPTIMIZERS[name](groups, **hyper, foreach=False))
    assert all(g["fused"] for g in ours.param_groups)
    for a, b in zip(fused, reference):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_no_fused_step_where_lightning_would_refuse_to_clip_or_the_kernels_do_not_run():
    import pytorch_lightning as pl

    p = torch.nn.Parameter(torch.zeros(3))
    clipping_bf16 = pl.Trainer(precision="bf16-mixed", gradient_clip_val=1.0, accelerator="cpu", logger=False,
                               enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    assert lightning_clips_under_autocast(clipping_bf16)
    for kwargs in ({"precision": "bf16-mixed"}, {"precision": "32-true", "gradient_clip_val": 1.0}):
        trainer = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, **kwargs)
        assert not lightning_clips_under_autocast(trainer), kwargs
    optimizer = build_optimizer("adamw", [{"params": [p]}], clips_under_autocast=True, lr=1e-3)
    assert not optimizer.param_groups[0]["fused"]
    assert not fused_step_applies([{"params": [p]}, {"params": [torch.nn.Parameter(torch.zeros(2, device="meta"))]}])
    with pytest.raises(ValueError, match="choose one of adamw, sgd"):
        build_optimizer("lamb", [{"params": [p]}], lr=1e-3)


def test_a_resumed_state_keeps_the_step_the_optimizer_was_built_with():
    gen = torch.Generator().manual_seed(1)
    init = torch.randn(9, 7, generator=gen)
    grads = [[torch.randn(9, 7, generator=gen)] for _ in range(5)]

    def params():
        return [torch.nn.Parameter(init.clone())]

    reference = params()
    _steps(torch.optim.AdamW(reference, lr=1e-2, foreach=False), reference, grads)
    # two steps with torch's default loop (a checkpoint from before the fused step), three fused after it
    first = params()
    loop = torch.optim.AdamW(first, lr=1e-2, foreach=False)
    _steps(loop, first, grads[:2])
    resumed = build_optimizer("adamw", [{"params": first}], lr=1e-2)
    resumed.load_state_dict(loop.state_dict())
    assert resumed.param_groups[0]["fused"] is True
    _steps(resumed, first, grads[2:])
    torch.testing.assert_close(first[0], reference[0], rtol=1e-6, atol=1e-7)
    # a fused state continued where Lightning would refuse to clip for a fused step: torch's default step
    refusing = build_optimizer("adamw", [{"params": first}], clips_under_autocast=True, lr=1e-2)
    refusing.load_state_dict(resumed.state_dict())
    assert not refusing.param_groups[0]["fused"] and len(refusing.state) == 1
    refusing.step()


@pytest.mark.parametrize("name, kwargs, first_block", [
    ("convnext_atto", dict(depths=(1, 1, 2, 1), dims=(16, 24, 32, 40), num_classes=5), "stages.0.blocks.0.conv_dw.weight"),
    ("vit_small_patch16_dinov3", dict(depth=2, embed_dim=48, num_heads=3, num_classes=5), "blocks.0.gamma_1")])
def test_layer_decay_and_normalisation_of_dinov3_and_convnext(name, kwargs, first_block):
    """Fine-tuning: the stem learns slowest, each block faster, the head at the full rate; the images are
    normalised as the name's weights were (ImageNet's mean and std)."""
    model = create_model(name, **kwargs)
    scales = {n: g["lr_scale"] for g in param_groups(model, weight_decay=0.05, layer_decay=0.5) for n in g["param_names"]}
    stem = "stem.0.weight" if "convnext" in name else "patch_embed.proj.weight"
    depth = sum(kwargs["depths"]) if "depths" in kwargs else kwargs["depth"]
    assert scales[stem] == 0.5 ** (depth + 1) and scales[first_block] == 0.5 ** depth
    assert max(scales.values()) == 1.0 == scales[[n for n in scales if n.startswith("head")][0]]
    assert pretrained_normalisation(name, "weights.pth") == {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
