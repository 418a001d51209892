"""CNN names in create_model: torchvision's ResNets, timm's models as 'timm:NAME', and attention=."""
from __future__ import annotations

import warnings

import pytest
import timm
import torch
import torchvision

import vision_attn
from vision_attn import CheckpointError, ConfigError
from vision_attn.layers.plugins import CBAM, IdentityBlend, SqueezeExcite


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"])
def test_torchvision_resnets_by_name(name):
    with torch.device("meta"):
        ours = vision_attn.create_model(name)
        peer = torchvision.models.get_model(name, weights=None)
    assert isinstance(ours, type(peer)) and n_params(ours) == n_params(peer)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in peer.state_dict().items()}
    assert name in vision_attn.list_models("resnet*")


def test_resnet_gives_torchvisions_outputs_with_its_weights():
    torch.manual_seed(0)
    peer = torchvision.models.resnet18(weights=None).eval()
    ours = vision_attn.create_model("resnet18").eval()
    ours.load_state_dict(peer.state_dict())
    x = torch.randn(2, 3, 64, 80)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), peer(x))


def test_small_resnet_trains_with_num_classes():
    model = vision_attn.create_model("resnet18", num_classes=7, img_size=64)
    out = model(torch.randn(2, 3, 64, 64))
    assert out.shape == (2, 7)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_resnet50_with_se_has_timms_count():
    with torch.device("meta"):
        model = vision_attn.create_model("resnet50", attention="se")
    assert n_params(model) == 28_088_024
    assert isinstance(model.layer4[2].se, SqueezeExcite)


def test_attention_as_a_dict():
    model = vision_attn.create_model("resnet18", attention={"block": "cbam", "after": "layer4.*",
                                                            "position": "residual", "reduction": 8,
                                                            "zero_init": True, "input_size": 32})
    assert isinstance(model.layer4[1].se, IdentityBlend) and isinstance(model.layer4[1].se.block, CBAM)
    assert model.layer4[1].se.block.channel.fc1.out_channels == 512 // 8
    assert not hasattr(model.layer3[1], "se")
    plain = vision_attn.create_model("resnet18", attention="none")
    assert not any(isinstance(m, (CBAM, SqueezeExcite)) for m in plain.modules())


def test_timm_models_by_prefix():
    model = vision_attn.create_model("timm:resnet18", num_classes=5, attention="eca")
    assert isinstance(model, timm.models.ResNet) and model.fc.out_features == 5
    theirs = timm.create_model("resnet18", num_classes=5, block_args=dict(attn_layer="eca"))
    assert n_params(model) == n_params(theirs)
    with pytest.raises(ConfigError, match="timm has no model 'resnet5O'.*timm:resnet50"):
        vision_attn.create_model("timm:resnet5O")
    with pytest.raises(ConfigError, match="unknown model source 'tim'.*timm:"):
        vision_attn.create_model("tim:resnet50")
    assert not vision_attn.list_models("timm*")


def test_pretrained_backbone_then_blocks(tmp_path):
    """A torchvision resnet50 file loads into resnet50 + SE: strictly, apart from the new blocks."""
    source = torchvision.models.resnet50()
    torch.save(source.state_dict(), tmp_path / "resnet50.pth")
    model = vision_attn.create_model("resnet50", pretrained=tmp_path / "resnet50.pth", attention="se",
                                     img_size=64).eval()
    for key, value in source.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    # and with zero_init the pretrained network's outputs are unchanged
    zero = vision_attn.create_model("resnet50", pretrained=tmp_path / "resnet50.pth",
                                    attention={"block": "cbam", "zero_init": True, "input_size": 64}).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(zero(x), source.eval()(x))


def test_file_saved_with_the_blocks_loads_strictly_and_partial_files_fail(tmp_path):
    trained = vision_attn.create_model("resnet18", attention="se", img_size=32)
    with torch.no_grad():
        trained.layer1[0].se.fc1.bias.fill_(0.5)
    torch.save(trained.state_dict(), tmp_path / "se_resnet18.pth")
    again = vision_attn.create_model("resnet18", attention="se", pretrained=tmp_path / "se_resnet18.pth", img_size=32)
    assert torch.equal(again.layer1[0].se.fc1.bias, trained.layer1[0].se.fc1.bias)
    partial = {k: v for k, v in trained.state_dict().items() if not k.startswith("layer4.1.se.")}
    torch.save(partial, tmp_path / "partial.pth")
    with pytest.raises(CheckpointError, match="missing from the file: layer4.1.se"):
        vision_attn.create_model("resnet18", attention="se", pretrained=tmp_path / "partial.pth", img_size=32)
    with pytest.raises(CheckpointError, match="not in the model: layer1.0.se"):
        vision_attn.create_model("resnet18", pretrained=tmp_path / "se_resnet18.pth")


def test_pretrained_with_another_class_count_refits_the_head(tmp_path):
    torch.save(torchvision.models.resnet18().state_dict(), tmp_path / "r18.pth")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = vision_attn.create_model("resnet18", pretrained=tmp_path / "r18.pth", num_classes=10,
                                         attention="eca", img_size=32)
    assert model.fc.out_features == 10
    assert any("re-initialised" in str(w.message) for w in caught)


def test_attention_errors():
    with pytest.raises(ConfigError, match="has no ResNet blocks.*'after'"):
        vision_attn.create_model("vit_tiny_patch16_224", depth=1, attention="se")
    with pytest.raises(ConfigError, match="names no block"):
        vision_attn.create_model("resnet18", attention={"after": "layer1.*"})
    with pytest.raises(ConfigError, match="unknown attention block 'sse'"):
        vision_attn.create_model("resnet18", attention="sse")
    with pytest.raises(ConfigError, match="give a block name"):
        vision_attn.create_model("resnet18", attention=3)
    with pytest.raises(ConfigError, match="resnet18: .*unexpected keyword.*torchvision's ResNet takes"):
        vision_attn.create_model("resnet18", depth=3)


def test_timm_prefix_passes_img_size_only_to_models_that_take_it():
    cnn = vision_attn.create_model("timm:resnet18", img_size=64, attention="se")
    assert cnn.layer1[0].se.fc1.in_channels == 64
    vit = vision_attn.create_model("timm:vit_tiny_patch16_224", img_size=64, depth=1)
    assert tuple(vit.patch_embed.img_size) == (64, 64)


@pytest.mark.parametrize("block", ["se", "cbam", "cbam_ultralytics", "eca", "coord"])
def test_report_macs_equal_count_flops_difference(block):
    from vision_attn.analysis import count_flops, count_model_flops

    plain = count_model_flops("resnet50")
    with torch.device("meta"):
        model = vision_attn.create_model("resnet50")
    report = vision_attn.insert_attention(model, block, after="Bottleneck", position="residual")
    counted = count_flops(model, 224)
    assert counted.params - plain.params == report.params
    assert counted.macs - plain.macs == report.macs > 0
