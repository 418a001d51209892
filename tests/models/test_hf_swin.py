"""transformers' Swin and Swin V2 folders (``model_type`` ``swin``, ``swinv2``) through the public path
``vision_attn.create_model(pretrained=FOLDER)``, against transformers itself (a test-only peer), and
our models written back as transformers folders (``Family.from_ours``).

Tiny random configs (embed_dim 16, depths (2, 2) so that both stages have a shifted block, window 4,
patch 2, image 32); every peer parameter is perturbed so that no table or norm keeps its constant
initialisation. Sizes: the checkpoint's 32x32 and 48x32 (stage maps 24x16 and 12x8: window multiples
larger than the window). What differs by design elsewhere: at maps that are not window multiples
transformers pads and then rolls (torchvision's order) where timm's rule, ours under timm's names,
rolls and then pads (other windows and masks unless the padding equals the shift: e.g. at 36x36 here);
and transformers' Swin V1 shrinks the window and drops the shift at run time (keeping the change on
the module) when a map's shorter side is <= the window, where timm's rule fixes both from the
configured size. Neither happens at these sizes.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import vision_attn
from vision_attn.errors import CheckpointError
from vision_attn.models.hf import FAMILIES, read_transformers_folder

TINY = dict(image_size=32, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4)
SIZES = [(32, 32), (48, 32)]  # the checkpoint's size and another (H, W), both window multiples at every stage
TOL = 1e-4
PEERS = {
    # model_type: (config class, headless class, classifier class, config extras, a registered name of ours)
    "swin": (transformers.SwinConfig, transformers.SwinModel, transformers.SwinForImageClassification, {},
             "swin_tiny_patch4_window7_224"),
    # pretrained_window_sizes: stage 0 rescales its bias MLP's input by a window of 6, stage 1 by its own
    "swinv2": (transformers.Swinv2Config, transformers.Swinv2Model, transformers.Swinv2ForImageClassification,
               {"pretrained_window_sizes": [6, 0]}, "swinv2_tiny_window8_256"),
}


def _randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.1)
    return model.eval()


def _peer(model_type: str, head: bool, **overrides) -> torch.nn.Module:
    config_cls, headless_cls, classifier_cls, extras, _ = PEERS[model_type]
    config = config_cls(**{**TINY, **extras, **overrides}, num_labels=5)
    torch.manual_seed(0)
    return _randomize((classifier_cls if head else headless_cls)(config))


def _images(size: tuple[int, int]) -> torch.Tensor:
    return torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(size[0] * 100 + size[1]))


def _numel(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _out(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Our output, or the peer's logits (a classifier) or pooler_output (headless)."""
    with torch.no_grad():
        out = model.eval()(x)
    if isinstance(out, torch.Tensor):
        return out
    return out.logits if getattr(out, "logits", None) is not None else out.pooler_output


def _assert_matches(model: torch.nn.Module, peer: torch.nn.Module) -> None:
    for size in SIZES:
        x = _images(size)
        ours, theirs = _out(model, x), _out(peer, x)
        assert ours.shape == theirs.shape
        assert (ours - theirs).abs().max() < TOL, size


@pytest.fixture(scope="module", params=sorted(PEERS))
def classifier_folder(request, tmp_path_factory) -> tuple[str, torch.nn.Module, Path]:
    """(model_type, the peer classifier, the folder its save_pretrained wrote)."""
    peer = _peer(request.param, head=True)
    folder = tmp_path_factory.mktemp(f"{request.param}_cls")
    peer.save_pretrained(folder)
    return request.param, peer, folder


def test_classifier_folder_matches_the_peer(classifier_folder):
    model_type, peer, folder = classifier_folder
    name, kwargs = read_transformers_folder(folder).model_args()
    assert name in vision_attn.list_models(model_type.replace("v2", "v2_*") + "_*")
    assert (kwargs["embed_dim"], kwargs["depths"], kwargs["num_heads"], kwargs["window_size"], kwargs["img_size"],
            kwargs["patch_size"], kwargs["num_classes"]) == (16, (2, 2), (2, 4), 4, (32, 32), (2, 2), 5)
    if model_type == "swinv2":
        assert kwargs["pretrained_window_sizes"] == (6, 0)
    for model in (vision_attn.create_model(pretrained=folder), vision_attn.create_model(PEERS[model_type][4],
                                                                                        pretrained=folder)):
        assert model.num_classes == 5
        assert _numel(model) == _numel(peer)  # no parameter excluded: the peer's pooler has none
        _assert_matches(model, peer)


def _legacy_keys_check(folder: Path) -> None:
    """save_pretrained of transformers 5.x writes Swin V1 in the 4.x layout (it reverses its renames)."""
    keys = set(load_file(str(folder / "model.safetensors")))
    assert "swin.encoder.layers.0.blocks.0.attention.self.query.weight" in keys
    assert not any("q_proj" in k or "mlp.fc1" in k for k in keys)


def _loads_cleanly(folder: Path, cls=transformers.AutoModelForImageClassification) -> torch.nn.Module:
    peer, info = cls.from_pretrained(str(folder), output_loading_info=True, use_kernels=False)
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    return peer.eval()


def test_swin_both_layouts_and_4x_buffers(tmp_path):
    """The 4.x layout (what save_pretrained writes, with 4.x's persistent relative_position_index buffers
    added) and the 5.x module layout (q_proj, o_proj, mlp.fc1, relative_position_bias.*): each a
    file the peer's own from_pretrained loads to the same outputs, and ours loads to them too."""
    peer = _peer("swin", head=True)
    legacy = tmp_path / "legacy"
    peer.save_pretrained(legacy)
    _legacy_keys_check(legacy)
    state = load_file(str(legacy / "model.safetensors"))
    for i, depth in enumerate(TINY["depths"]):
        for j in range(depth):
            state[f"swin.encoder.layers.{i}.blocks.{j}.attention.self.relative_position_index"] = (
                peer.swin.encoder.layers[i].blocks[j].attention.relative_position_bias.relative_position_index
                .view(16, 16).clone())
    save_file(state, str(legacy / "model.safetensors"), metadata={"format": "pt"})

    new = tmp_path / "new"
    new.mkdir()
    (new / "config.json").write_text((legacy / "config.json").read_text())
    new_state = {k: v.contiguous() for k, v in peer.state_dict().items()}
    assert "swin.encoder.layers.0.blocks.0.attention.q_proj.weight" in new_state
    save_file(new_state, str(new / "model.safetensors"), metadata={"format": "pt"})

    for folder in (legacy, new):
        reloaded = _loads_cleanly(folder)
        _assert_matches(reloaded, peer)  # a true file of that layout: the peer reads it back
        _assert_matches(vision_attn.create_model(pretrained=folder), peer)


@pytest.mark.parametrize("model_type", sorted(PEERS))
def test_headless_folder_gives_the_peers_pooled_features(model_type, tmp_path):
    """SwinModel / Swinv2Model (keys without the base-model prefix): num_classes 0, and our output
    is the peer's pooler_output (the mean of the final layernorm's tokens)."""
    peer = _peer(model_type, head=False)
    peer.save_pretrained(tmp_path)
    assert not any(k.startswith(model_type + ".") for k in load_file(str(tmp_path / "model.safetensors")))
    model = vision_attn.create_model(pretrained=tmp_path)
    assert model.num_classes == 0
    assert _numel(model) == _numel(peer)
    _assert_matches(model, peer)


def test_head_kept_replaced_dropped(tmp_path):
    peer = _peer("swin", head=True)
    peer.save_pretrained(tmp_path)
    x = _images(SIZES[1])
    with torch.no_grad():
        pooled = peer.swin(pixel_values=x).pooler_output
        logits = peer(pixel_values=x).logits
    kept = vision_attn.create_model(pretrained=tmp_path, num_classes=5)
    assert (_out(kept, x) - logits).abs().max() < TOL
    with pytest.warns(UserWarning, match="re-initialised"):
        replaced = vision_attn.create_model(pretrained=tmp_path, num_classes=7)
    assert replaced.head.fc.out_features == 7
    with torch.no_grad():
        features = replaced.eval().forward_head(replaced.forward_features(x), pre_logits=True)
    assert (features - pooled).abs().max() < TOL
    with pytest.warns(UserWarning, match="dropped"):
        dropped = vision_attn.create_model(pretrained=tmp_path, num_classes=0)
    assert (_out(dropped, x) - pooled).abs().max() < TOL


def test_masked_image_modelling_folder_loads_its_backbone(tmp_path):
    """SwinForMaskedImageModeling (SimMIM): the mask token and the pixel decoder are dropped; what
    remains is the backbone, whose pooled features are the mean of the peer's final tokens."""
    config = transformers.SwinConfig(**TINY)
    torch.manual_seed(0)
    peer = _randomize(transformers.SwinForMaskedImageModeling(config))
    peer.save_pretrained(tmp_path)
    keys = set(load_file(str(tmp_path / "model.safetensors")))
    assert "swin.embeddings.mask_token" in keys and any(k.startswith("decoder.") for k in keys)
    model = vision_attn.create_model(pretrained=tmp_path)
    assert model.num_classes == 0
    for size in SIZES:
        x = _images(size)
        with torch.no_grad():
            theirs = peer.swin(pixel_values=x).last_hidden_state.mean(dim=1)
        assert (_out(model, x) - theirs).abs().max() < TOL


@pytest.mark.parametrize("edit, match", [
    ({"use_absolute_embeddings": True}, "use_absolute_embeddings"),
    ({"hidden_act": "relu"}, "hidden_act='relu'"),
    ({"layer_norm_eps": 1e-6}, "layer_norm_eps=1e-06"),
    ({"window_size": [4, 4]}, "window_size"),
])
def test_unbuildable_config_is_refused(classifier_folder, tmp_path, edit, match):
    model_type, _, folder = classifier_folder
    config = {**json.loads((folder / "config.json").read_text()), **edit}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").symlink_to(folder / "model.safetensors")
    with pytest.raises(CheckpointError, match=match):
        vision_attn.create_model(pretrained=tmp_path)


def test_unknown_key_is_refused_by_name(tmp_path):
    peer = _peer("swinv2", head=True)
    peer.save_pretrained(tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    state["swinv2.encoder.layers.0.blocks.0.attention.self.key.bias"] = torch.zeros(16)  # Swin V2's key has none
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"attention\.self\.key\.bias"):
        vision_attn.create_model(pretrained=tmp_path)


# ------------------------------------------------------------------------------------------------ ours -> transformers
OURS = dict(img_size=32, patch_size=2, embed_dim=16, depths=(2, 2), num_heads=(2, 4), window_size=4)


@pytest.mark.parametrize("name, family, model_type, kwargs", [
    ("swin_tiny_patch4_window7_224", "swin", "swin", dict(num_classes=5)),
    ("swinv2_tiny_window8_256", "swinv2", "swinv2", dict(num_classes=5, pretrained_window_sizes=(6, 0))),
    # torchvision's Swin V2 (its rule, its single qkv.bias): convert.py maps swin_* names to "swin";
    # the family writes the Swin V2 folder the model is; headless
    ("swin_v2_t", "swin", "swinv2", dict(num_classes=0, pretrained_window_sizes=(0, 0))),
])
def test_from_ours_loads_in_the_peer(name, family, model_type, kwargs, tmp_path):
    torch.manual_seed(0)
    model = _randomize(vision_attn.create_model(name, **OURS, **kwargs))
    config, state = FAMILIES[family].from_ours(model, model.state_dict())
    assert config["model_type"] == model_type
    folder = tmp_path / "ours"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    head = kwargs["num_classes"] > 0
    peer = _loads_cleanly(folder, transformers.AutoModelForImageClassification if head else transformers.AutoModel)
    assert type(peer).__name__ == config["architectures"][0]
    # excluded: the key third of torchvision's V2 qkv.bias, which it never uses and transformers lacks
    unused_key_bias = sum(v.numel() // 3 for k, v in model.state_dict().items()
                          if model_type == "swinv2" and k.endswith(".attn.qkv.bias"))
    assert _numel(peer) == _numel(model) - unused_key_bias
    _assert_matches(model, peer)
    peer.save_pretrained(tmp_path / "peer")  # the folder the peer itself writes: the same keys
    assert set(load_file(str(tmp_path / "peer" / "model.safetensors"))) == set(state)
    back = vision_attn.create_model(pretrained=folder)  # and back: our outputs
    for size in SIZES:
        x = _images(size)
        assert (_out(back, x) - _out(model, x)).abs().max() < TOL


def test_from_ours_refuses_a_stage_smaller_than_the_window():
    # patch 4, window 8 on 32 px: stage 1 is 4x4, which transformers' Swin V1 cannot run
    model = vision_attn.create_model("swin_tiny_patch4_window7_224", img_size=32, patch_size=4, embed_dim=16,
                                     depths=(2, 2), num_heads=(2, 4), window_size=8, num_classes=3)
    with pytest.raises(CheckpointError, match="smaller than the 8x8 window"):
        FAMILIES["swin"].from_ours(model, model.state_dict())
