"""transformers' ViT, DeiT and DINOv2 folders (vision_attn/models/hf/vit.py) through the public path
``create_model(pretrained=FOLDER)``, against transformers itself (random weights, tiny sizes), and
our models written back as transformers folders that transformers loads."""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file
from torch import nn

from tests.models.peer_weights import randomise
import vision_attn
from vision_attn.errors import CheckpointError
from vision_attn.models.convert import transformers_type
from vision_attn.models.hf import FAMILIES, read_transformers_folder
from vision_attn.models.hf.vit import DEFAULTS

TINY = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=3, image_size=32, patch_size=8)
SIZE = (32, 32)  # the checkpoints' image size (a 4x4 grid)
OTHER = (32, 48)  # another size (4x6)
SQUARE = (48, 48)  # another size, square
TOL = dict(atol=1e-4, rtol=0)


@dataclass(frozen=True)
class Case:
    cls: str
    config: dict[str, Any]
    name: str  # the closest registered name model_args returns
    prefix_rows: int = 1  # rows of transformers' position table ahead of the patches
    pooler: bool = False  # ViTModel/DeiTModel: the tanh pooler we drop
    extra: dict[str, Any] = field(default_factory=dict)


CASES = {
    "vit": Case("ViTForImageClassification", dict(model_type="vit", intermediate_size=96, num_labels=5),
                "vit_tiny_patch16_224"),
    # tanh GELU, no q/k/v bias, a large eps (1e-12 by default, and 0.1 here shows in the outputs), ratio 5/3
    "vit_model": Case("ViTModel", dict(model_type="vit", intermediate_size=80, hidden_act="gelu_new",
                                       qkv_bias=False, layer_norm_eps=0.1), "vit_tiny_patch16_224", pooler=True),
    "deit_teacher": Case("DeiTForImageClassificationWithTeacher", dict(model_type="deit", intermediate_size=96,
                                                                       num_labels=5),
                         "deit_tiny_distilled_patch16_224", prefix_rows=2),
    "deit": Case("DeiTForImageClassification", dict(model_type="deit", intermediate_size=96, num_labels=5,
                                                    num_channels=1), "deit_tiny_patch16_224", prefix_rows=2),
    "dinov2": Case("Dinov2Model", dict(model_type="dinov2", mlp_ratio=3), "vit_small_patch14_dinov2"),
    "dinov2_swiglu": Case("Dinov2Model", dict(model_type="dinov2", use_swiglu_ffn=True, use_mask_token=False),
                          "vit_small_patch14_dinov2"),
    "dinov2_reg": Case("Dinov2WithRegistersModel", dict(model_type="dinov2_with_registers", num_register_tokens=2),
                       "vit_small_patch14_reg4_dinov2"),
}


def _peer(case: Case, **overrides: Any) -> nn.Module:
    config = transformers.AutoConfig.for_model(**{**TINY, **case.config, **overrides})
    return randomise(getattr(transformers, case.cls)(config, **case.extra))


def _image(size: tuple[int, int] = SIZE, channels: int = 3) -> torch.Tensor:
    return torch.randn(2, channels, *size, generator=torch.Generator().manual_seed(1))


def _peer_out(peer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The peer's logits; a base model's pooled features (ViTModel/DeiTModel: the normalised class
    token, its pooler_output being the tanh pooler vision_attn drops). At another size than its
    config's, ViT and DeiT interpolate their table only when asked (DINOv2 always does)."""
    with torch.no_grad():
        out = peer(pixel_values=x, **_interpolate(peer))
    if getattr(out, "logits", None) is not None:
        return out.logits
    if isinstance(peer, (transformers.ViTModel, transformers.DeiTModel)):
        return out.last_hidden_state[:, 0]
    return out.pooler_output


def _interpolate(peer: nn.Module) -> dict[str, bool]:
    return {"interpolate_pos_encoding": True} if peer.config.model_type in ("vit", "deit") else {}


def _tokens(peer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    base = getattr(peer, peer.base_model_prefix, peer)
    with torch.no_grad():
        return base(pixel_values=x, **_interpolate(peer)).last_hidden_state


def _ours(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        return model.eval()(x), model.forward_features(x)


def _legacy(state: dict[str, torch.Tensor], model_type: str) -> dict[str, torch.Tensor]:
    """The 4.x layout of a 5.x state dict: transformers' conversion_mapping.py renames, inverted."""
    out: dict[str, torch.Tensor] = {}
    swiglu: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        for new, old in (("attention.q_proj", "attention.attention.query"),
                         ("attention.k_proj", "attention.attention.key"),
                         ("attention.v_proj", "attention.attention.value"),
                         ("attention.o_proj", "attention.output.dense")):
            key = key.replace(new, old)
        if model_type in ("vit", "deit"):
            key = re.sub(r"(^|\.)layers\.(\d+)\.", r"\1encoder.layer.\2.", key)
            key = key.replace(".mlp.fc1.", ".intermediate.dense.").replace(".mlp.fc2.", ".output.dense.")
        m = re.match(r"^(.*\.mlp\.)(gate_proj|up_proj)\.(weight|bias)$", key)
        if m:
            swiglu.setdefault(f"{m.group(1)}weights_in.{m.group(3)}", {})[m.group(2)] = value
            continue
        out[key.replace(".mlp.down_proj.", ".mlp.weights_out.")] = value
    for key, halves in swiglu.items():
        out[key] = torch.cat([halves["gate_proj"], halves["up_proj"]])
    return out


def _folder(peer: nn.Module, path: Path) -> Path:
    peer.save_pretrained(str(path))
    return path


def _legacy_folder(folder: Path, path: Path, model_type: str) -> Path:
    path.mkdir()
    shutil.copy(folder / "config.json", path / "config.json")
    save_file(_legacy(load_file(str(folder / "model.safetensors")), model_type), str(path / "model.safetensors"),
              metadata={"format": "pt"})
    return path


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("case_name", list(CASES))
def test_folder_loads_with_the_peers_outputs(case_name: str, tmp_path: Path) -> None:
    """Both key layouts, with and without a name, at the checkpoint's size and another: our logits (or
    pooled features) and every token equal the peer's; the parameter counts equal (less the pooler)."""
    case = CASES[case_name]
    model_type = case.config["model_type"]
    peer = _peer(case)
    folder = _folder(peer, tmp_path / "v5")
    channels = peer.config.num_channels
    x = _image(channels=channels)
    expected, tokens = _peer_out(peer, x), _tokens(peer, x)

    # the 4.x file: a true legacy file, loaded by transformers' own conversion with the same outputs
    legacy = _legacy_folder(folder, tmp_path / "v4", model_type)
    assert any(".attention.attention.query." in k for k in load_file(str(legacy / "model.safetensors")))
    legacy_peer, info = getattr(transformers, case.cls).from_pretrained(str(legacy), output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    torch.testing.assert_close(_peer_out(legacy_peer.eval(), x), expected, **TOL)

    assert read_transformers_folder(folder).model_args()[0] == case.name
    pooler = sum(p.numel() for n, p in peer.named_parameters() if ".pooler." in f".{n}") if case.pooler else 0
    for source in (folder, legacy):
        for name in (None, case.name):
            ours = vision_attn.create_model(name, pretrained=source)
            out, ours_tokens = _ours(ours, x)
            torch.testing.assert_close(out, expected, **TOL)
            torch.testing.assert_close(ours_tokens, tokens, **TOL)
    folded = TINY["hidden_size"] if model_type == "dinov2_with_registers" else 0  # the class row, in the token
    assert _count(ours) == _count(peer) - pooler - folded
    norms = [m for m in ours.modules() if isinstance(m, nn.LayerNorm)]
    assert {m.eps for m in norms} == {peer.config.layer_norm_eps}

    # other sizes, as the peer computes them (its table interpolated at run time, its own way): built at
    # one (the table kept at the folder's grid), and run at them from the checkpoint size
    for size in (SQUARE, OTHER):
        y = _image(size, channels)
        resized = vision_attn.create_model(pretrained=folder, img_size=size)
        assert resized.pos_embed.shape == ours.pos_embed.shape
        for model in (resized, ours):
            out, ours_tokens = _ours(model, y)
            torch.testing.assert_close(out, _peer_out(peer, y), **TOL)
            torch.testing.assert_close(ours_tokens, _tokens(peer, y), **TOL)


VIT_MASK_TOKEN = Case("ViTModel", dict(model_type="vit"), "", extra={"use_mask_token": True})


@pytest.mark.parametrize("case", [CASES["dinov2"], VIT_MASK_TOKEN], ids=["dinov2", "vit_mask_token"])
def test_mask_token_replaces_patches_as_the_peer_does(case: Case, tmp_path: Path) -> None:
    """DINOv2's mask token (1, D), and ViTModel(use_mask_token=True)'s (1, 1, D)."""
    peer = _peer(case)
    ours = vision_attn.create_model(pretrained=_folder(peer, tmp_path / "f"))
    x = _image()
    masks = torch.rand(2, 16, generator=torch.Generator().manual_seed(2)) > 0.5
    with torch.no_grad():
        theirs = peer(pixel_values=x, bool_masked_pos=masks).last_hidden_state
        torch.testing.assert_close(ours.forward_features(x, masks), theirs, **TOL)


def _features(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval().forward_features(x)


@pytest.mark.parametrize("case_name", ["vit", "deit_teacher"])
def test_head_kept_replaced_dropped(case_name: str, tmp_path: Path) -> None:
    case = CASES[case_name]
    peer = _peer(case)
    folder = _folder(peer, tmp_path / "f")
    x = _image()
    tokens = _tokens(peer, x)
    with pytest.warns(UserWarning, match="re-initialised"):
        replaced = vision_attn.create_model(pretrained=folder, num_classes=7)
    heads = [replaced.head] + ([replaced.head_dist] if case_name == "deit_teacher" else [])
    assert [tuple(h.weight.shape) for h in heads] == [(7, 48)] * len(heads)
    torch.testing.assert_close(_features(replaced, x), tokens, **TOL)
    with pytest.warns(UserWarning, match="dropped"):
        dropped = vision_attn.create_model(pretrained=folder, num_classes=0)
    pooled = tokens[:, :2].mean(1) if case_name == "deit_teacher" else tokens[:, 0]  # DeiT: both tokens, as the heads
    with torch.no_grad():
        torch.testing.assert_close(dropped.eval()(x), pooled, **TOL)


def test_dinov2_classifier_on_class_and_patch_mean_loads_replaced_or_dropped(tmp_path: Path) -> None:
    """Dinov2ForImageClassification reads concat(class token, mean of the patch tokens), a head
    VisionTransformer does not have: its backbone loads, the head only replaced or dropped."""
    peer = _peer(Case("Dinov2ForImageClassification", dict(model_type="dinov2", num_labels=5), ""))
    folder = _folder(peer, tmp_path / "f")
    x = _image()
    assert read_transformers_folder(folder).model_args()[1]["num_classes"] == 5
    with pytest.warns(UserWarning, match="dropped"):
        dropped = vision_attn.create_model(pretrained=folder, num_classes=0)
    with torch.no_grad():
        torch.testing.assert_close(dropped.eval()(x), peer.dinov2(pixel_values=x).pooler_output, **TOL)
    with pytest.warns(UserWarning, match="re-initialised"):
        replaced = vision_attn.create_model(pretrained=folder, num_classes=7)
    assert tuple(replaced.head.weight.shape) == (7, 48)
    torch.testing.assert_close(_features(replaced, x), _tokens(peer, x), **TOL)


def test_dinov2_classifier_on_class_and_patch_mean_is_not_kept(tmp_path: Path) -> None:
    peer = _peer(Case("Dinov2ForImageClassification", dict(model_type="dinov2", num_labels=5), ""))
    with pytest.raises(CheckpointError, match=r"the file's classifier \(head.weight \(5, 96\)\) reads other features "
                                              r"than VisionTransformer's head can: .* num_classes=0"):
        vision_attn.create_model(pretrained=_folder(peer, tmp_path / "f"))


FROM_OURS = {
    "vit": ("vit_tiny_patch16_224", dict(num_classes=5), "ViTForImageClassification"),
    "vit_headless": ("vit_tiny_patch16_224", dict(num_classes=0, act_layer=nn.ReLU), "ViTForImageClassification"),
    "deit_distilled": ("deit_tiny_distilled_patch16_224", dict(num_classes=5), "DeiTForImageClassificationWithTeacher"),
    "deit_one_register": ("deit_tiny_patch16_224", dict(num_classes=5, reg_tokens=1), "DeiTForImageClassification"),
    "dinov2": ("vit_small_patch14_dinov2", dict(num_classes=0, mask_token=True), "Dinov2Model"),
    "dinov2_head": ("vit_small_patch14_dinov2", dict(num_classes=5), "Dinov2ForImageClassification"),
    "dinov2_swiglu": ("vit_giant_patch14_dinov2", dict(num_classes=0), "Dinov2Model"),
    "dinov2_reg": ("vit_small_patch14_reg4_dinov2", dict(num_classes=0), "Dinov2WithRegistersModel"),
}


@pytest.mark.parametrize("case_name", list(FROM_OURS))
def test_from_ours_loads_in_the_peer(case_name: str, tmp_path: Path) -> None:
    """Our model -> the folder from_ours writes: transformers loads it with every key, gives our outputs,
    and saves the same config values and keys itself; loaded back by us, the same model (head kept)."""
    name, kwargs, architecture = FROM_OURS[case_name]
    patch = 8 if "patch16" in name else 7
    model = randomise(vision_attn.create_model(name, depth=2, embed_dim=48, num_heads=3, patch_size=patch,
                                                img_size=4 * patch, **kwargs))
    config, state = FAMILIES[transformers_type(name)].from_ours(model, model.state_dict())
    assert config["architectures"] == [architecture]
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    save_file(state, str(folder / "model.safetensors"))
    peer, info = getattr(transformers, architecture).from_pretrained(str(folder), output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    x = _image((4 * patch, 4 * patch))
    ours, _ = _ours(model, x)
    torch.testing.assert_close(_peer_out(peer.eval(), x), ours, **TOL)

    peer.save_pretrained(str(tmp_path / "peer"))
    saved = json.loads((tmp_path / "peer" / "config.json").read_text())
    assert {k: saved.get(k) for k in config} == config
    assert set(load_file(str(tmp_path / "peer" / "model.safetensors"))) == set(state)

    again = vision_attn.create_model(pretrained=folder)  # no warning: the head is kept
    assert _count(again) == _count(model) + (48 if case_name == "dinov2_reg" else 0)  # + the peer's mask token
    torch.testing.assert_close(_ours(again, x)[0], ours, **TOL)


def test_from_ours_refuses_what_the_peer_lacks() -> None:
    rope = vision_attn.create_model("vit_tiny_patch16_224", depth=1, embed_dim=48, num_heads=3, img_size=32,
                                    pos_embed="rope")
    with pytest.raises(CheckpointError, match="pos_embed='rope'"):
        FAMILIES["vit"].from_ours(rope, rope.state_dict())
    scaled = vision_attn.create_model("vit_tiny_patch16_224", depth=1, embed_dim=48, num_heads=3, img_size=32,
                                      init_values=0.1)
    with pytest.raises(CheckpointError, match="LayerScale"):
        FAMILIES["vit"].from_ours(scaled, scaled.state_dict())


def test_unknown_keys_and_config_values_are_refused(tmp_path: Path) -> None:
    case = CASES["vit"]
    folder = _folder(_peer(case), tmp_path / "f")
    state = load_file(str(folder / "model.safetensors"))
    save_file({**state, "vit.decoder.0.weight": torch.zeros(1)}, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match="decoder.0.weight"):
        vision_attn.create_model(pretrained=folder)
    save_file(state, str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_act": "quick_gelu"}))
    with pytest.raises(CheckpointError, match="hidden_act='quick_gelu'"):
        vision_attn.create_model(pretrained=folder)


@pytest.mark.parametrize("model_type", list(DEFAULTS))
def test_omitted_config_values_read_as_the_peer_reads_them(model_type: str) -> None:
    defaults = transformers.AutoConfig.for_model(model_type).to_dict()
    assert {k: defaults[k] for k in DEFAULTS[model_type]} == DEFAULTS[model_type]


@pytest.mark.parametrize("config, name, sizes", [
    # google/vit-base-patch16-224 (layer_norm_eps 1e-12), facebook/deit-base-distilled-patch16-224,
    # facebook/dinov2-giant (SwiGLU halves of 4096), facebook/dinov2-with-registers-large
    (dict(model_type="vit", hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
          architectures=["ViTForImageClassification"]), "vit_base_patch16_224", (768, 3072)),
    (dict(model_type="deit", hidden_size=768, intermediate_size=3072,
          architectures=["DeiTForImageClassificationWithTeacher"]),
     "deit_base_distilled_patch16_224", (768, 3072)),
    (dict(model_type="dinov2", hidden_size=1536, num_hidden_layers=40, num_attention_heads=24, use_swiglu_ffn=True,
          image_size=518, patch_size=14), "vit_giant_patch14_dinov2", (1536, 8192)),
    (dict(model_type="dinov2_with_registers", hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
          image_size=518, patch_size=14), "vit_large_patch14_reg4_dinov2", (1024, 4096)),
])
def test_published_configs_take_the_closest_name(config: dict, name: str, sizes: tuple[int, int]) -> None:
    got, kwargs = FAMILIES[config["model_type"]].model_args(config, {})
    assert got == name
    assert (kwargs["embed_dim"], int(kwargs["embed_dim"] * kwargs["mlp_ratio"])) == sizes
    assert kwargs["num_classes"] == 0
    with torch.device("meta"):
        model = vision_attn.create_model(got, **kwargs)
    peer_config = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        peer = transformers.AutoModel.from_config(peer_config)
    pooler = sum(p.numel() for n, p in peer.named_parameters() if n.startswith("pooler."))
    mask = peer_config.hidden_size if "dinov2" in got else 0  # DINOv2's mask token: ours only when the file has one
    folded = peer_config.hidden_size if "reg4" in got else 0  # the class token's position row, folded into it
    assert _count(model) == _count(peer) - pooler - mask - folded


@pytest.mark.parametrize("model_type", ["dinov2", "dinov2_with_registers"])
def test_dinov2_folder_of_518_px_at_224_and_another_size_computes_what_transformers_does(model_type, tmp_path):
    """A folder whose config says 518 px (a 37x37 table), run at 224 (16x16) and 168x252: transformers
    interpolates its table at run time (DINOv2 without antialiasing, with registers with it); ours keeps
    the table at 37x37 and does the same, built at 518 or at the size it runs at."""
    cls = transformers.Dinov2Model if model_type == "dinov2" else transformers.Dinov2WithRegistersModel
    config = transformers.AutoConfig.for_model(model_type, hidden_size=48, num_hidden_layers=1, num_attention_heads=3,
                                               image_size=518, patch_size=14, mlp_ratio=2)
    randomise(cls(config)).save_pretrained(str(tmp_path / "hf"))
    peer = cls.from_pretrained(str(tmp_path / "hf")).eval()
    for size in [(224, 224), (168, 252)]:
        x = _image(size)
        with torch.no_grad():
            want = peer(pixel_values=x)
        for img_size in (None, size):
            ours = vision_attn.create_model(pretrained=tmp_path / "hf", img_size=img_size).eval()
            assert ours.pos_embed_grid == (37, 37)
            with torch.no_grad():
                torch.testing.assert_close(ours(x), want.pooler_output, **TOL)
                torch.testing.assert_close(ours.forward_features(x), want.last_hidden_state, **TOL)
