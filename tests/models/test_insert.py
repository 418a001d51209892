"""insert_attention: counts against timm, strict loading, zero-init identity, selection, positions,
the report, and clear errors."""
from __future__ import annotations

import copy
import io
import pickle

import pytest
import timm
import torch
import torch.fx
import torchvision
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

import vision_attn
from vision_attn import ConfigError, insert_attention
from vision_attn.layers.plugins import CBAM, IdentityBlend, SqueezeExcite

BLOCKS = ["se", "cbam", "cbam_ultralytics", "eca", "coord"]


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


class Scale(nn.Module):
    """A test block: multiplies by a fixed factor (0 removes what it is applied to)."""

    def __init__(self, channels: int, *, factor: float = 0.0) -> None:
        super().__init__()
        self.channels, self.factor = channels, factor

    def forward(self, x):
        return x * self.factor


# ------------------------------------------------------------------------------------------ counts
def test_se_on_every_bottleneck_has_timms_se_resnet50_count():
    with torch.device("meta"):
        ours = torchvision.models.resnet50()
        theirs = timm.create_model("resnet50", block_args=dict(attn_layer="se"))
    report = insert_attention(ours, "se", after="Bottleneck", position="residual")
    assert len(report) == 16
    assert n_params(ours) == n_params(theirs) == 28_088_024
    assert report.params == 28_088_024 - 25_557_032
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())  # timm's SE-ResNet keys exactly


def test_timm_se_resnet50_weights_give_the_same_outputs():
    theirs = timm.create_model("resnet50", block_args=dict(attn_layer="se")).eval()
    ours = torchvision.models.resnet50()
    insert_attention(ours, "se", after=Bottleneck, position="residual", input_size=64)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(x), theirs(x), atol=1e-5, rtol=1e-5)


def test_paper_cbam_on_resnet50_has_the_papers_count():
    with torch.device("meta"):
        model = torchvision.models.resnet50()
    insert_attention(model, "cbam", after="Bottleneck", position="residual")
    assert n_params(model) == 28_089_624  # the paper reports 28.09 M


# ------------------------------------------------------------------------------------------ loading and zero init
def test_pretrained_state_dict_loads_strictly_apart_from_new_keys():
    model = torchvision.models.resnet50()
    before = {k: v.shape for k, v in model.state_dict().items()}
    pretrained = {k: torch.randn_like(v) if v.is_floating_point() else v for k, v in model.state_dict().items()}
    report = insert_attention(model, "cbam", after="Bottleneck", position="residual", input_size=64)
    after = {k: v.shape for k, v in model.state_dict().items()}
    assert {k: after[k] for k in before} == before  # existing keys keep their names and shapes
    assert set(after) - set(before) == set(report.new_keys)
    assert all(k.startswith(tuple(f"{r.name}." for r in report)) for k in report.new_keys)
    missing, unexpected = model.load_state_dict(pretrained, strict=False)
    assert unexpected == []
    # torch does not list a batch norm's num_batches_tracked as missing (older files lack it)
    assert set(missing) == {k for k in report.new_keys if not k.endswith("num_batches_tracked")}
    assert torch.equal(model.layer2[1].conv2.weight, pretrained["layer2.1.conv2.weight"])


def test_zero_init_keeps_resnet50_outputs_identical():
    model = torchvision.models.resnet50().eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        before = model(x)
    report = insert_attention(model, "cbam", after="Bottleneck", position="residual", zero_init=True, input_size=64)
    assert report.zero_init and isinstance(model.layer3[0].se, IdentityBlend)
    with torch.no_grad():
        assert torch.equal(model(x), before)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("position", ["after", "residual"])
def test_zero_init_identity_for_every_block_and_position(block, position):
    model = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        before = model(x)
    insert_attention(model, block, after="BasicBlock", position=position, zero_init=True, input_size=64)
    with torch.no_grad():
        after = model(x)
    assert torch.equal(after, before)
    model.train()
    out = model(torch.randn(2, 3, 64, 64))
    out.sum().backward()
    scales = [m.scale for m in model.modules() if isinstance(m, IdentityBlend)]
    assert len(scales) == 8 and all(s.grad is not None and s.grad != 0 for s in scales)


# ------------------------------------------------------------------------------------------ selection
def test_select_by_type_name_glob_predicate_and_list():
    def names(after, **kw):
        model = torchvision.models.resnet18()
        return [r.where for r in insert_attention(model, Scale, after=after, input_size=32, factor=1.0, **kw)]

    blocks = [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)]
    assert names(BasicBlock) == blocks
    assert names("BasicBlock") == blocks
    assert names("layer3.*") == ["layer3.0", "layer3.1"]  # * stays within one level
    assert names("layer4.*.conv?") == ["layer4.0.conv1", "layer4.0.conv2", "layer4.1.conv1", "layer4.1.conv2"]
    assert names("layer4.**.bn2") == ["layer4.0.bn2", "layer4.1.bn2"]
    assert names(lambda name, m: isinstance(m, nn.Conv2d) and m.stride == (2, 2)) == [
        "conv1", "layer2.0.conv1", "layer2.0.downsample.0", "layer3.0.conv1", "layer3.0.downsample.0",
        "layer4.0.conv1", "layer4.0.downsample.0"]
    assert names(["layer1.0", "layer4.*"]) == ["layer1.0", "layer4.0", "layer4.1"]
    assert names("Sequential") == ["layer1", "layer2", "layer2.0.downsample", "layer3", "layer3.0.downsample",
                                   "layer4", "layer4.0.downsample"]  # model order


def test_report_rows_and_table():
    model = torchvision.models.resnet18()
    report = insert_attention(model, "se", after="layer2.*", position="residual", input_size=64)
    assert [(r.where, r.name, r.block, r.channels, r.size) for r in report] == [
        ("layer2.0", "layer2.0.se", "SqueezeExcite", 128, (8, 8)),
        ("layer2.1", "layer2.1.se", "SqueezeExcite", 128, (8, 8))]
    se = model.layer2[0].se
    assert report[0].params == n_params(se) == 128 * 8 + 8 + 8 * 128 + 128
    assert report[0].macs == 2 * 128 * 8  # two 1x1 convolutions on the pooled 1x1 map
    assert report.params == 2 * report[0].params and report.macs == 2 * report[0].macs
    assert report.input_shape == (1, 3, 64, 64)
    table = str(report)
    assert "position=residual" in table and "1x3x64x64" in table
    assert "layer2.1.se" in table and "SqueezeExcite" in table and f"{report.params:,}" in table
    assert table.splitlines()[-1].startswith("total")


def test_after_position_appends_to_the_module_output():
    model = torchvision.models.resnet18().eval()
    insert_attention(model, Scale, after="layer4.1", input_size=32)  # zero out the last block's output
    assert isinstance(model.layer4[1].post_attn, Scale)
    with torch.no_grad():
        logits = model(torch.randn(2, 3, 32, 32))
    torch.testing.assert_close(logits, model.fc.bias.expand(2, -1))


def test_after_a_sequential_appends_the_block_as_its_last_element():
    model = torchvision.models.resnet18().eval()
    insert_attention(model, Scale, after="layer4", input_size=32)
    assert list(model.layer4._modules) == ["0", "1", "post_attn"]
    assert not model.layer4._forward_hooks
    with torch.no_grad():
        torch.testing.assert_close(model(torch.randn(1, 3, 32, 32)), model.fc.bias[None])


@pytest.mark.parametrize("library", ["torchvision", "timm"])
def test_residual_position_is_on_the_branch_before_the_addition(library):
    make = (torchvision.models.resnet18 if library == "torchvision"
            else lambda: timm.create_model("resnet18"))
    model = make().eval()
    block = model.layer1[1]  # no downsample: out = relu(branch(x) + x)
    insert_attention(model, Scale, after="layer1.1", position="residual", input_size=32)
    assert isinstance(block.se, Scale)
    x = torch.randn(2, 64, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(block(x), torch.relu(x))  # the branch is zeroed, the identity remains
    if library == "timm":
        assert not block.bn2._forward_hooks  # timm's block calls its own ``se`` slot
    else:
        assert block.bn2._forward_hooks


@pytest.mark.parametrize("library", ["torchvision", "timm"])
@pytest.mark.parametrize("block", BLOCKS)
def test_blocks_train_inside_resnets(library, block):
    # timm zero-initialises each block's last norm, which would hand the blocks zeros: not here
    model = (torchvision.models.resnet18() if library == "torchvision"
             else timm.create_model("resnet18", zero_init_last=False))
    insert_attention(model, block, after="BasicBlock", position="residual", input_size=32)
    out = model(torch.randn(2, 3, 32, 32))
    out.square().mean().backward()
    attn = [p for name, p in model.named_parameters() if ".se." in name]
    assert attn and all(p.grad is not None and p.grad.abs().sum() > 0 for p in attn)


def test_timm_resnet_state_dict_and_counts_match_timms_own_attention():
    ours = timm.create_model("resnet18")
    insert_attention(ours, "eca", after="BasicBlock", position="residual", input_size=32)
    theirs = timm.create_model("resnet18", block_args=dict(attn_layer="eca"))
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}


def test_meta_device_model_costs_nothing_and_gets_meta_blocks():
    with torch.device("meta"):
        model = torchvision.models.resnet50()
    report = insert_attention(model, "coord", after="Bottleneck")
    assert model.layer1[0].post_attn.conv1.weight.device.type == "meta"
    assert report.macs > 0 and report.input_shape == (1, 3, 224, 224)


def test_block_dtype_follows_the_model():
    model = torchvision.models.resnet18().to(torch.bfloat16)
    insert_attention(model, "se", after="BasicBlock", position="residual", input_size=32)
    assert model.layer1[0].se.fc1.weight.dtype == torch.bfloat16


def test_training_flags_are_restored_and_batch_norm_statistics_untouched():
    model = torchvision.models.resnet18().train()
    model.layer1.eval()
    stats = model.bn1.running_mean.clone()
    insert_attention(model, "se", after="BasicBlock", input_size=32)
    assert model.training and not model.layer1[0].training and model.layer2[0].training
    assert not model.layer1[0].post_attn.training and model.layer2[0].post_attn.training  # as their module
    assert torch.equal(model.bn1.running_mean, stats)


# ------------------------------------------------------------------------------------------ robustness
def test_deepcopy_pickle_and_fx_keep_the_blocks():
    model = torchvision.models.resnet18().eval()
    insert_attention(model, "cbam", after="BasicBlock", position="residual", input_size=32)
    insert_attention(model, "eca", after="layer4", input_size=32)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        ref = model(x)
        copied = copy.deepcopy(model)
        assert copied.layer1[0].se is not model.layer1[0].se
        torch.testing.assert_close(copied(x), ref)
        with torch.no_grad():  # the copy's hooks call the copy's blocks
            copied.layer1[0].se.channel.fc2.bias.add_(1.0)
        torch.testing.assert_close(model(x), ref)
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        torch.testing.assert_close(torch.load(buffer, weights_only=False)(x), ref)
        torch.testing.assert_close(pickle.loads(pickle.dumps(model))(x), ref)
        traced = torch.fx.symbolic_trace(model)
        torch.testing.assert_close(traced(x), ref)
        # blocks after a traced module are in the graph; hooks on leaf modules (bn2) run with them
        assert any("post_attn" in str(n.target) for n in traced.graph.nodes)


# ------------------------------------------------------------------------------------------ errors
def test_unknown_block_suggests():
    with pytest.raises(ConfigError, match="unknown attention block 'cbma'.*did you mean 'cbam'"):
        insert_attention(torchvision.models.resnet18(), "cbma", after="BasicBlock")


def test_after_matching_nothing_lists_candidates():
    with pytest.raises(ConfigError) as info:
        insert_attention(torchvision.models.resnet18(), "se", after="Bottleneck")
    message = str(info.value)
    assert "after='Bottleneck' matches no module of ResNet" in message
    assert "BasicBlock" in message and "Conv2d" in message  # the types
    assert "layer1.0" in message and "conv1" in message  # the names
    with pytest.raises(ConfigError, match="did you mean 'layer3'"):
        insert_attention(torchvision.models.resnet18(), "se", after="layr3")
    with pytest.raises(ConfigError, match="matches no module"):
        insert_attention(torchvision.models.resnet18(), "se", after=lambda name, m: False)


def test_bad_selectors_positions_and_models():
    model = torchvision.models.resnet18()
    with pytest.raises(ConfigError, match="select modules by type"):
        insert_attention(model, "se", after=3)
    with pytest.raises(ConfigError, match="position='middle'"):
        insert_attention(model, "se", after="BasicBlock", position="middle")
    with pytest.raises(ConfigError, match="needs a ResNet block.*layer1 is a Sequential"):
        insert_attention(model, "se", after="layer1", position="residual")
    with pytest.raises(ConfigError, match="takes an nn.Module.*YAML"):
        insert_attention("yolov8n.yaml", "cbam", after="C2f")
    with pytest.raises(ConfigError, match="reducton.*reduction"):
        insert_attention(model, "se", after="BasicBlock", reducton=4)
    with pytest.raises(ConfigError, match="block=3"):
        insert_attention(model, 3, after="BasicBlock")
    assert not any(isinstance(m, SqueezeExcite) for m in model.modules())  # nothing half-inserted


def test_output_that_is_not_a_feature_map():
    model = torchvision.models.resnet18()
    with pytest.raises(ConfigError, match=r"output of fc is shape \(1, 1000\), not a \(B, C, H, W\)"):
        insert_attention(model, "se", after="fc", input_size=32)
    flat = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten())
    with pytest.raises(ConfigError, match=r"output of 1 is shape \(1, 144\)"):
        insert_attention(flat, "se", after="1", input_size=8)


def test_module_that_does_not_run():
    model = torchvision.models.resnet18()
    model.unused = nn.Conv2d(3, 3, 1)
    with pytest.raises(ConfigError, match="unused did not run in a forward pass"):
        insert_attention(model, "se", after="unused", input_size=32)


def test_failing_dry_forward_says_which_input():
    model = vision_attn.create_model("vit_tiny_patch16_224", depth=1)
    with pytest.raises(ConfigError, match=r"dry forward pass .* failed on a \(1, 3, 200, 200\) input"):
        insert_attention(model, "se", after="patch_embed.proj", input_size=200)


def test_inserting_twice_at_one_place_is_refused():
    model = torchvision.models.resnet18()
    insert_attention(model, "se", after="layer1.0", position="residual", input_size=32)
    with pytest.raises(ConfigError, match="already has attention on its residual branch"):
        insert_attention(model, "eca", after="layer1.0", position="residual", input_size=32)
    insert_attention(model, "se", after="layer1.0", input_size=32)
    with pytest.raises(ConfigError, match="already has a block at layer1.0.post_attn"):
        insert_attention(model, "eca", after="layer1.0", input_size=32)
    timm_model = timm.create_model("resnet18", block_args=dict(attn_layer="se"))
    with pytest.raises(ConfigError, match="already has attention"):
        insert_attention(timm_model, CBAM, after="BasicBlock", position="residual", input_size=32)


def test_block_on_a_tensor_that_is_not_4d_inside_a_model():
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 4))
    block = SqueezeExcite(4)
    with pytest.raises(vision_attn.DataError, match=r"SqueezeExcite expects a \(B, C, H, W\).*\(2, 4\)"):
        block(model(torch.randn(2, 3, 2, 2)))
