"""transformers' CLIP and SigLIP vision towers (vision_attn/models/hf/clip.py) through the public path
``create_model(pretrained=FOLDER)``, against transformers itself (random weights, tiny sizes), in the
5.x layout it saves and the 4.x layout of the files on people's disks; and our towers written back
as the folders transformers 5.x saves."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file
from torch import nn

from tests.models.peer_weights import randomise
import vision_attn
from vision_attn.errors import CheckpointError
from vision_attn.models.hf import FAMILIES, read_transformers_folder

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
            patch_size=8)  # a 4x4 grid
TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, vocab_size=99,
            max_position_embeddings=16, bos_token_id=0, eos_token_id=1, pad_token_id=1)
SIZE, OTHER = 32, 48  # the checkpoint's image size, and another (transformers' CLIP and SigLIP take square ones)
ATOL = 1e-4


def _image(size: int = SIZE) -> torch.Tensor:
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))


def _close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    diff = (ours - theirs).abs().max().item()
    assert diff <= ATOL, f"max abs diff {diff:.3g} > {ATOL}"


@dataclass(frozen=True)
class Case:
    cls: str
    vision: dict[str, Any]  # the vision tower's config (over TINY)
    name: str  # the registered name model_args returns
    output: Callable[[nn.Module, torch.Tensor], torch.Tensor]  # the peer's output our model returns
    dual: str = ""  # the dual model's model_type ("clip", "siglip"): the vision tower under vision_config
    extra: tuple[str, ...] = ()  # prefixes of the peer's parameters that are not the image tower's (dropped)
    legacy_prefix: bool = False  # 4.x saved this class under vision_model.


def _pooled(model: nn.Module, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    return model(pixel_values=x, **kwargs).pooler_output


def _embeds(model: nn.Module, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    return model(pixel_values=x, **kwargs).image_embeds


def _image_features(model: nn.Module, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    return model.get_image_features(pixel_values=x, **kwargs).pooler_output


def _tokens(model: nn.Module, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    return model(pixel_values=x, **kwargs).last_hidden_state


CASES = {
    # 8 px patches: the closest name is the 16 px one (the sizes come from the config)
    "clip_vision": Case("CLIPVisionModel", dict(model_type="clip_vision_model"), "vit_base_patch16_clip_quickgelu_224",
                        _pooled, legacy_prefix=True),
    # exact GELU, a large eps (shows in the outputs), 16 px patches, MLP ratio 5/2
    "clip_projection": Case("CLIPVisionModelWithProjection",
                            dict(model_type="clip_vision_model", hidden_act="gelu", layer_norm_eps=0.1, patch_size=16,
                                 intermediate_size=80, projection_dim=24), "vit_base_patch16_clip_224", _embeds),
    "clip": Case("CLIPModel", dict(model_type="clip_vision_model"), "vit_base_patch16_clip_quickgelu_224",
                 _image_features, dual="clip", extra=("text_model.", "text_projection.", "logit_scale")),
    "siglip_vision": Case("SiglipVisionModel", dict(model_type="siglip_vision_model"), "vit_base_patch16_siglip_224",
                          _pooled, legacy_prefix=True),
    "siglip_gap": Case("SiglipVisionModel", dict(model_type="siglip_vision_model", vision_use_head=False,
                                                 hidden_act="gelu"), "vit_base_patch16_siglip_gap_224", _tokens),
    "siglip": Case("SiglipModel", dict(model_type="siglip_vision_model"), "vit_base_patch16_siglip_224",
                   _image_features, dual="siglip", extra=("text_model.", "logit_scale", "logit_bias")),
}


def _config(case: Case, **vision: Any) -> transformers.PretrainedConfig:
    vision = {**TINY, **case.vision, **vision}
    if not case.dual:
        return transformers.AutoConfig.for_model(**vision)
    text_type = "clip_text_model" if case.dual == "clip" else "siglip_text_model"
    return transformers.AutoConfig.for_model(case.dual, vision_config=vision, text_config=dict(TEXT, model_type=text_type),
                                             **({"projection_dim": 24} if case.dual == "clip" else {}))


def _peer(case: Case, **vision: Any) -> nn.Module:
    return randomise(getattr(transformers, case.cls)(_config(case, **vision)))


def _ours(folder: Path, **kwargs: Any) -> nn.Module:
    return vision_attn.create_model(pretrained=folder, **kwargs).eval()


def _ours_output(case: Case, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model.forward_features(x) if case.output is _tokens else model(x)


def _legacy(folder: Path, dest: Path) -> Path:
    """The 4.x file of a 5.x CLIPVisionModel / SiglipVisionModel folder: the keys under vision_model. (the
    inverse of conversion_mapping.py's PrefixChange), with the position_ids buffer files before 4.31 held."""
    dest.mkdir()
    state = load_file(folder / "model.safetensors")
    legacy = {f"vision_model.{k}": v for k, v in state.items()}
    rows = state["embeddings.position_embedding.weight"].shape[0]
    legacy["vision_model.embeddings.position_ids"] = torch.arange(rows)[None]
    save_file(legacy, dest / "model.safetensors", metadata={"format": "pt"})
    (dest / "config.json").write_text((folder / "config.json").read_text())
    return dest


@pytest.mark.parametrize("key", list(CASES))
def test_folder_same_outputs_as_transformers(tmp_path, key):
    case = CASES[key]
    peer = _peer(case)
    folder = tmp_path / "hf"
    peer.save_pretrained(folder)
    ours = _ours(folder)
    assert read_transformers_folder(folder).model_args()[0] == case.name
    x = _image()
    with torch.no_grad():
        expected = case.output(peer, x)
        _close(_ours_output(case, ours, x), expected)
    # the same parameters, less the dual model's text tower and logit scale (and bias)
    peer_params = sum(p.numel() for n, p in peer.named_parameters() if not n.startswith(case.extra))
    assert sum(p.numel() for p in ours.parameters()) == peer_params
    if case.legacy_prefix:  # the 4.x file: transformers reads it as the same model, and so do we
        legacy = _legacy(folder, tmp_path / "legacy")
        assert all(k.startswith("vision_model.") for k in load_file(legacy / "model.safetensors"))
        peer_legacy = getattr(transformers, case.cls).from_pretrained(legacy).eval()
        with torch.no_grad():
            _close(case.output(peer_legacy, x), expected)
            _close(_ours_output(case, _ours(legacy), x), expected)


@pytest.mark.parametrize("key", list(CASES))
def test_another_image_size(tmp_path, key):
    """At 48 px the folder computes what transformers computes (interpolate_pos_encoding=True: the 4x4
    table resampled bicubically without antialiasing at run time): built at 48 px (the table kept at
    the folder's grid) and built at 32 px, run at 48."""
    case = CASES[key]
    peer = _peer(case).eval()
    folder = tmp_path / "hf"
    peer.save_pretrained(folder)
    ours = _ours(folder, img_size=OTHER)
    assert ours.pos_embed_grid == (SIZE // case.vision.get("patch_size", 8),) * 2
    x = _image(OTHER)
    with torch.no_grad():
        expected = case.output(peer, x, interpolate_pos_encoding=True)
        _close(_ours_output(case, ours, x), expected)
        _close(_ours_output(case, _ours(folder), x), expected)


def test_dual_config_that_leaves_out_the_defaults(tmp_path):
    """A CLIPModel config.json whose vision_config states only what differs from CLIPVisionConfig's
    defaults (as some 4.x files do): the defaults fill in (quick GELU, eps 1e-5, 3 channels, ...)."""
    case = CASES["clip"]
    peer = _peer(case)
    folder = tmp_path / "hf"
    peer.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    defaults = transformers.CLIPVisionConfig().to_dict()
    config["vision_config"] = {k: v for k, v in config["vision_config"].items()
                               if k == "model_type" or defaults.get(k, object()) != v}
    assert "hidden_act" not in config["vision_config"] and "layer_norm_eps" not in config["vision_config"]
    (folder / "config.json").write_text(json.dumps(config))
    x = _image()
    with torch.no_grad():
        expected = case.output(peer, x)
        _close(case.output(transformers.CLIPModel.from_pretrained(folder).eval(), x), expected)  # the peer reads it so
        _close(_ours(folder)(x), expected)


def test_unknown_activation_is_refused_by_name(tmp_path):
    folder = tmp_path / "hf"
    _peer(CASES["clip_vision"]).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_act": "gelu_unknown"}))
    with pytest.raises(CheckpointError, match="hidden_act='gelu_unknown'"):
        _ours(folder)


def test_mlp_width_that_a_float_ratio_misses(tmp_path):
    """56 * (61 / 56) rounds down to 60 in floating point: the MLP is still built 61 wide."""
    peer = _peer(CASES["clip_vision"], hidden_size=56, intermediate_size=61)
    folder = tmp_path / "hf"
    peer.save_pretrained(folder)
    ours = _ours(folder)
    assert ours.blocks[0].mlp.fc1.out_features == 61
    with torch.no_grad():
        _close(ours(_image()), _pooled(peer, _image()))


@pytest.mark.parametrize("extra_key, match", [
    ("vision_model.encoder.layers.0.self_attn.rotary.weight", r"vision_model\.encoder\.layers\.0\.self_attn\.rotary"),
    ("classifier.weight", r"'classifier\.weight'.*ForImageClassification"),
])
def test_unknown_keys_are_named(tmp_path, extra_key, match):
    folder = tmp_path / "hf"
    _peer(CASES["clip_projection"]).save_pretrained(folder)
    state = load_file(folder / "model.safetensors")
    state[extra_key] = torch.zeros(4, 4)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=match):
        _ours(folder)


# ------------------------------------------------------------------------------------------------
# ours -> transformers
def _write(tmp_path: Path, config: dict, state: dict) -> Path:
    folder = tmp_path / "ours_hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in state.items()}, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


SMALL = dict(embed_dim=32, depth=2, num_heads=4, img_size=32, patch_size=8)


@pytest.mark.parametrize("name, kwargs, cls, output", [
    ("vit_base_patch16_clip_quickgelu_224", dict(num_classes=24, head_bias=False), "CLIPVisionModelWithProjection", _embeds),
    ("vit_base_patch16_clip_224", dict(num_classes=0), "CLIPVisionModel", _pooled),
    ("vit_base_patch16_siglip_224", dict(act_layer="gelu_tanh"), "SiglipVisionModel", _pooled),
])
def test_from_ours_loads_in_transformers(tmp_path, name, kwargs, cls, output):
    ours = randomise(vision_attn.create_model(name, **SMALL, **kwargs))
    family = FAMILIES["siglip_vision_model" if "siglip" in name else "clip_vision_model"]
    config, state = family.from_ours(ours, ours.state_dict())
    assert config["architectures"] == [cls]
    peer = getattr(transformers, cls).from_pretrained(_write(tmp_path, config, state)).eval()
    x = _image()
    with torch.no_grad():
        _close(output(peer, x), ours(x))
    assert set(state) == set(getattr(transformers, cls)(peer.config).state_dict())  # the 5.x keys, all of them


def test_from_ours_refuses_what_transformers_lacks(tmp_path):
    clip = randomise(vision_attn.create_model("vit_base_patch16_clip_224", **SMALL, num_classes=10))  # a biased head
    with pytest.raises(CheckpointError, match="head with a bias"):
        FAMILIES["clip"].from_ours(clip, clip.state_dict())
    with torch.no_grad():
        clip.head.bias.zero_()  # a head converted from CLIP's projection (timm's rule): written as the projection
    config, state = FAMILIES["clip"].from_ours(clip, clip.state_dict())
    peer = transformers.CLIPVisionModelWithProjection.from_pretrained(_write(tmp_path, config, state)).eval()
    with torch.no_grad():
        _close(_embeds(peer, _image()), clip.eval()(_image()))
    layer_scale = vision_attn.create_model("vit_base_patch16_clip_224", **SMALL, num_classes=0, init_values=0.1)
    with pytest.raises(CheckpointError, match="LayerScale"):
        FAMILIES["clip"].from_ours(layer_scale, layer_scale.state_dict())
    plain_vit = vision_attn.create_model("vit_tiny_patch16_224", depth=1, img_size=32, num_classes=0)
    with pytest.raises(CheckpointError, match="pre-norm"):
        FAMILIES["clip"].from_ours(plain_vit, plain_vit.state_dict())
    siglip = vision_attn.create_model("vit_base_patch16_siglip_224", **SMALL, num_classes=3)
    with pytest.raises(CheckpointError, match="classifier"):
        FAMILIES["siglip"].from_ours(siglip, siglip.state_dict())
