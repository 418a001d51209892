"""kernels.accelerate (the fast paths put on a built model from outside) and kernels.judge_plan (a plan
judged on the model's whole step)."""
from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn

import vision_attn
from vision_attn.kernels import FusedLinear, KernelPlan, accelerate, judge_plan, resolve_plan, sdpa
from vision_attn.kernels.cache import PLANS_FILE
from vision_attn.kernels import judge
from vision_attn.kernels.judge import candidates
from vision_attn.layers import Mlp, WindowAttention
from vision_attn.layers.attention import record_attention
from vision_attn.layers.tables import Tables
from vision_attn.models.yolo.rtdetr import AIFI

from tests.ops import SMALL_MODELS

MODELS = [*SMALL_MODELS, ("swinv2_tiny_window8_256", dict(depths=(2, 2), embed_dim=16, num_heads=(1, 2), window_size=4, pretrained_window_sizes=(0, 0),
                                                         num_classes=7), 32),
          ("vit_small_patch14_dinov2", dict(depth=2, embed_dim=48, num_heads=2, num_classes=7, ffn_layer="swiglu"), 28)]


@pytest.mark.parametrize("name,kwargs,size", MODELS)
def test_accelerate_keeps_the_state_dict_and_the_outputs(name, kwargs, size):
    torch.manual_seed(0)
    plain = vision_attn.create_model(name, img_size=size, **kwargs).eval()
    fast = accelerate(copy.deepcopy(plain))
    x = torch.randn(2, 3, size, size)
    assert list(fast.state_dict()) == list(plain.state_dict())
    assert not any(isinstance(m, FusedLinear) for m in plain.modules())  # create_model's model stays plain
    assert any(isinstance(m, FusedLinear) for m in fast.modules())
    with torch.no_grad():
        torch.testing.assert_close(fast(x), plain(x), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(fast(x), plain(x), atol=1e-5, rtol=1e-4)  # kept tables serve a second call
    classes = [type(m) for m in fast.modules()]
    assert [type(m) for m in accelerate(fast).modules()] == classes  # twice changes nothing


def test_accelerate_swaps_the_seams_and_the_fast_forms():
    block = nn.Module()
    block.mlp, block.aifi, block.attn = Mlp(8, 16), AIFI(8, 16, num_heads=2), WindowAttention(8, 2, 3)
    block.tables = Tables()
    accelerate(block)
    assert type(block.mlp).__name__ == "FastMlp" and type(block.aifi).__name__ == "FastAIFI"
    assert type(block.attn).__name__ == "FastWindowAttention" and block.attn.sdpa is sdpa
    assert type(block.aifi.ma.out_proj) is FusedLinear and block.aifi.ma.sdpa is sdpa
    assert type(block.tables).__name__ == "KeptTables"


def test_a_subclass_that_overrides_what_a_fast_form_replaces_keeps_its_own():
    class MyAttention(WindowAttention):
        def attend(self, qkv, mask, dropout_p=0.0):
            return super().attend(qkv, mask * 0, dropout_p)

    class MyMlp(Mlp):  # adds nothing the fast form replaces: gets the fast form under its own name
        pass

    holder = nn.Module()
    holder.attn, holder.mlp = MyAttention(8, 2, 3), MyMlp(8, 16)
    accelerate(holder)
    assert type(holder.attn) is MyAttention and type(holder.attn.qkv) is FusedLinear
    assert type(holder.mlp).__name__ == "MyMlp" and isinstance(holder.mlp, MyMlp) and type(holder.mlp) is not MyMlp


def test_candidates_are_distinct_plans():
    fixed = resolve_plan("onednn")
    # fp32: fused attention, so "linear only" is the plan itself and "attention only" is ATen's
    assert list(candidates(fixed, torch.float32)) == ["measured", "aten"]
    bf16 = candidates(fixed, torch.bfloat16)  # bf16: explicit attention, oneDNN products
    assert list(bf16) == ["measured", "aten", "linear only", "attention only"]
    assert bf16["linear only"].choice(torch.bfloat16).attention == "fused"
    assert bf16["attention only"].choice(torch.bfloat16).linear.forward == "aten"
    assert list(candidates(resolve_plan("aten"), torch.float32)) == ["measured"]


def test_judge_plan_times_a_copy_and_keeps_its_verdict(tmp_path, monkeypatch):
    monkeypatch.setenv("VISION_ATTN_CACHE", str(tmp_path))
    monkeypatch.setattr(judge, "STEADY", float("inf"))  # kept whatever else the machine is doing
    torch.manual_seed(0)
    model = vision_attn.create_model("vit_tiny_patch16_224", depth=1, embed_dim=32, num_heads=2, img_size=32,
                                     num_classes=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(2, 3, 32, 32)
    rng = torch.get_rng_state()
    plan = resolve_plan("onednn")
    name, judged, seconds = judge_plan(model, x, train=True, plan=plan, rounds=2)
    assert name in candidates(plan, torch.float32) and isinstance(judged, KernelPlan)
    assert set(seconds) == set(candidates(plan, torch.float32)) and all(s > 0 for s in seconds.values())
    assert torch.equal(rng, torch.get_rng_state())  # the random stream of the run is untouched
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not any(isinstance(m, FusedLinear) for m in model.modules()) and model.training
    stored = json.loads((tmp_path / PLANS_FILE).read_text())
    assert [k for k in stored if k.startswith("step v4 train")] and stored[next(iter(stored))]["choice"] == name
    assert judge_plan(model, x, train=True, plan=plan)[0] == name  # read back, not timed again


def test_judge_chooses_pytorchs_kernels_unless_a_fast_path_gains_beyond_noise_and_keeps_steady_verdicts():
    steady = {"aten": [1.00, 1.01, 1.02], "linear only": [0.99, 0.99, 1.00], "attention only": [0.96, 0.97, 0.97]}
    assert judge._verdict(steady) == {"choice": "attention only", "steady": True,
                                      "seconds": {"aten": 1.00, "linear only": 0.99, "attention only": 0.96}}
    assert judge._verdict({**steady, "attention only": [0.99, 0.99, 1.00]})["choice"] == "aten"  # 1% < MARGIN
    busy = judge._verdict({**steady, "linear only": [0.90, 1.20, 1.30]})
    assert busy["choice"] == "linear only" and not busy["steady"]


def test_an_unsteady_verdict_is_used_and_timed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("VISION_ATTN_CACHE", str(tmp_path))
    monkeypatch.setattr(judge, "STEADY", -1.0)  # no rounds are steady enough
    model = vision_attn.create_model("vit_tiny_patch16_224", depth=1, embed_dim=32, num_heads=2, img_size=32,
                                     num_classes=3)
    name, _, _ = judge_plan(model, torch.randn(2, 3, 32, 32), train=False, plan=resolve_plan("onednn"), rounds=1)
    assert name in candidates(resolve_plan("onednn"), torch.float32)
    assert not (tmp_path / PLANS_FILE).exists() or not json.loads((tmp_path / PLANS_FILE).read_text())


def test_accelerate_without_kernels_keeps_pytorchs_layers_and_the_other_fast_paths():
    name, kwargs, size = SMALL_MODELS[1]  # a Swin: window attention, tables, gather
    plain = vision_attn.create_model(name, img_size=size, **kwargs).eval()
    model = accelerate(copy.deepcopy(plain), kernels=False)
    assert not any(isinstance(m, FusedLinear) for m in model.modules())
    block = model.layers[0].blocks[0]
    assert type(block.mlp) is Mlp and "sdpa" not in vars(block.attn)  # PyTorch's, without the plan's dispatch
    assert type(block.attn).__name__ == "FastWindowAttention" and type(block.windows).__name__.startswith(("Kept", "Shifted"))
    assert block.gather is not type(block).gather  # the gather whose gradient is a gather
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        torch.testing.assert_close(model(x), plain(x), atol=1e-5, rtol=1e-4)


def test_needs_kernels_is_false_for_pytorchs_kernels_alone():
    from vision_attn.kernels import needs_kernels

    assert not needs_kernels(resolve_plan("aten"), torch.float32)
    assert needs_kernels(resolve_plan("onednn"), torch.float32) and needs_kernels(resolve_plan("onednn"), torch.bfloat16)
    aten_choices = KernelPlan("measured", {t: resolve_plan("aten").choice(t) for t in (torch.float32, torch.bfloat16)})
    assert not needs_kernels(aten_choices, torch.float32)  # a measured plan that judged PyTorch's kernels fastest


def _count_native(monkeypatch) -> list[int]:
    calls = [0]
    native = torch._transformer_encoder_layer_fwd

    def counted(*args):
        calls[0] += 1
        return native(*args)
    monkeypatch.setattr(torch, "_transformer_encoder_layer_fwd", counted)
    return calls


@pytest.mark.parametrize("kernels", [False, True])
def test_a_standard_block_runs_inference_as_the_native_encoder_layer(monkeypatch, kernels):
    torch.manual_seed(0)
    plain = vision_attn.create_model("vit_tiny_patch16_224", img_size=32, depth=2, num_classes=5).eval()
    fast = accelerate(copy.deepcopy(plain), kernels=kernels)
    calls = _count_native(monkeypatch)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad(), vision_attn.kernels.kernel_plan("aten"):
        torch.testing.assert_close(fast(x), plain(x), atol=1e-5, rtol=1e-4)
    assert calls[0] == 2  # one op per block
    with vision_attn.kernels.kernel_plan("aten"):
        fast(x).sum().backward()  # gradients recorded: the layers' path
        with record_attention(fast) as maps, torch.no_grad():
            fast(x)  # attention maps wanted: the layers' path, which keeps the weights
    assert calls[0] == 2 and len(maps) == 2
    fast.train()
    with torch.no_grad(), vision_attn.kernels.kernel_plan("aten"):
        fast(x)
    assert calls[0] == 2


def test_a_block_of_another_form_keeps_its_layers(monkeypatch):
    torch.manual_seed(0)
    scaled = vision_attn.create_model("vit_tiny_patch16_224", img_size=32, depth=1, init_values=1e-2).eval()
    hooked = accelerate(vision_attn.create_model("vit_tiny_patch16_224", img_size=32, depth=1).eval(), kernels=False)
    hooked.blocks[0].mlp.fc1.register_forward_hook(lambda *_: None)
    calls = _count_native(monkeypatch)
    with torch.no_grad():
        accelerate(scaled, kernels=False)(torch.randn(1, 3, 32, 32))  # layer scale: not the native op's form
        hooked(torch.randn(1, 3, 32, 32))  # a hook on a part must run
    assert calls[0] == 0


def test_under_bf16_autocast_the_native_layer_runs_in_bfloat16(monkeypatch):
    torch.manual_seed(0)
    plain = vision_attn.create_model("vit_tiny_patch16_224", img_size=32, depth=2, num_classes=5).eval()
    fast = accelerate(copy.deepcopy(plain), kernels=False)
    calls = _count_native(monkeypatch)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad(), vision_attn.kernels.kernel_plan("aten"), torch.autocast("cpu", dtype=torch.bfloat16):
        ours, ref = fast(x), plain(x)
        fast(x)  # the bf16 copies of the weights are kept
    assert calls[0] == 4 and ours.dtype == ref.dtype
    torch.testing.assert_close(ours.float(), ref.float(), atol=0.05, rtol=0.05)
    kept = fast.blocks[0].__dict__["_cast"][1]
    with torch.no_grad():
        fast.blocks[0].attn.qkv.weight.add_(1.0)  # a changed weight is cast again
        with torch.autocast("cpu", dtype=torch.bfloat16):
            fast(x)
    assert fast.blocks[0].__dict__["_cast"][1][0] is not kept[0]
