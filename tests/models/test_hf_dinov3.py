"""transformers' DINOv3 ViT folders (vision_attn/models/hf/dinov3.py) through ``create_model(pretrained=
FOLDER)``, against ``DINOv3ViTModel`` itself (random weights, 2 blocks of width 48): pooled output and
tokens at the folder's size and others, both key layouts (5.x, and 4.x as on the Hub), the
training-time coordinate augmentation drawn as transformers draws it, and options vision_attn lacks
refused in one line naming the file and the option."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from tests.models.peer_weights import randomise
import vision_attn
from vision_attn.errors import CheckpointError

TINY = dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=3, image_size=64)
TOL = dict(atol=1e-4, rtol=0)


def _folder(path: Path, **config) -> tuple[Path, transformers.DINOv3ViTModel]:
    randomise(transformers.DINOv3ViTModel(transformers.DINOv3ViTConfig(**{**TINY, **config}))).save_pretrained(str(path))
    return path, transformers.DINOv3ViTModel.from_pretrained(str(path)).eval()


def _legacy(folder: Path, path: Path) -> Path:
    """The folder as transformers 4.x wrote it (the Hub's facebook/dinov3-* files): ``layer.{i}``."""
    path.mkdir()
    (path / "config.json").write_text((folder / "config.json").read_text())
    state = {k.removeprefix("model."): v for k, v in load_file(str(folder / "model.safetensors")).items()}
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


@pytest.mark.parametrize("config", [dict(num_register_tokens=4),  # q/v biases, GELU MLP
                                    dict(use_gated_mlp=True, hidden_act="silu", query_bias=False, value_bias=False,
                                         num_register_tokens=0, layer_norm_eps=1e-3)],
                         ids=["mlp_registers", "gated_no_registers"])
def test_folder_gives_the_peers_outputs_at_its_size_and_others(tmp_path, config):
    folder, peer = _folder(tmp_path / "hf", **config)
    legacy = _legacy(folder, tmp_path / "v4")
    assert any(k.startswith("layer.0.") for k in load_file(str(legacy / "model.safetensors")))
    for source in (folder, legacy):
        ours = vision_attn.create_model(pretrained=source).eval()
        assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in peer.parameters())
        for size in [(64, 64), (48, 96)]:  # the config's size, another (3x6 patches)
            x = torch.randn(2, 3, *size)
            with torch.no_grad():
                want = peer(pixel_values=x)
                torch.testing.assert_close(ours(x), want.pooler_output, **TOL)
                torch.testing.assert_close(ours.forward_features(x), want.last_hidden_state, **TOL)


def test_training_augmentation_draws_as_transformers(tmp_path):
    """transformers rescales the rotary coordinates in training (pos_embed_rescale=2.0 by default; a
    shift and jitter here too): with the same seed, the same outputs; in eval mode none."""
    folder, peer = _folder(tmp_path / "hf", num_register_tokens=2, pos_embed_shift=0.2, pos_embed_jitter=1.2)
    ours = vision_attn.create_model(pretrained=folder)
    assert (ours.rope.shift, ours.rope.jitter, ours.rope.rescale) == (0.2, 1.2, 2.0)
    x = torch.randn(2, 3, 64, 64)
    peer.train(), ours.train()
    with torch.no_grad():
        torch.manual_seed(5)
        want = peer(pixel_values=x).pooler_output
        torch.manual_seed(5)
        got = ours(x)
    torch.testing.assert_close(got, want, **TOL)
    peer.eval(), ours.eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(x), peer(pixel_values=x).pooler_output, **TOL)


@pytest.mark.parametrize("change, option", [(dict(key_bias=True), "key_bias=True"),
                                            (dict(proj_bias=False), "proj_bias=False"),
                                            (dict(value_bias=False), "query_bias=True")])
def test_an_option_vision_attn_lacks_is_refused_naming_the_file_and_option(tmp_path, change, option):
    folder, _ = _folder(tmp_path / "hf", num_hidden_layers=1, **change)
    with pytest.raises(CheckpointError) as info:
        vision_attn.create_model(pretrained=folder)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(folder / "config.json")) and option in message
