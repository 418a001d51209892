"""`vision-attn convert RUN --to timm|transformers`: the peer loads what was written and gives our
outputs; models the peer does not have are refused and nothing is written."""
import json
from pathlib import Path

import pytest
import timm
import torch

from tests.checkpoints import VIT_KW, classifier_checkpoint
from vision_attn.cli import main
from vision_attn.errors import CheckpointError
import vision_attn
from vision_attn.models.convert import to_timm, to_transformers
from vision_attn.tasks import load_run


@pytest.fixture
def run(tmp_path) -> Path:
    (tmp_path / "run").mkdir()
    return classifier_checkpoint(tmp_path / "run" / "best.ckpt").parent


def _ours(run: Path, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return load_run(run).model(x)


def test_to_timm_loads_with_the_printed_pretrained_cfg_overlay(run, tmp_path, capsys):
    out = tmp_path / "timm.safetensors"
    assert main(["convert", str(run), "--to", "timm", "-o", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["peer"] == "timm" and result["max_diff"] < 1e-4 and Path(result["path"]) == out
    kwargs = {k: v for k, v in VIT_KW.items() if k not in ("num_classes", "img_size")}
    peer = timm.create_model("vit_tiny_patch16_224", pretrained=True,
                             pretrained_cfg_overlay=dict(file=str(out), num_classes=10),
                             num_classes=10, img_size=16, **kwargs).eval()
    assert result["load"].startswith("timm.create_model('vit_tiny_patch16_224', pretrained=True, "
                                     f"pretrained_cfg_overlay=dict(file='{out}', num_classes=10), num_classes=10")
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(peer(x), _ours(run, x), atol=1e-4, rtol=0)


def test_to_timm_refuses_what_timm_does_not_have_and_writes_nothing(run, tmp_path, capsys):
    model = load_run(run).model
    out = tmp_path / "x.safetensors"
    with pytest.raises(CheckpointError, match="timm has no model named 'vit_b_16'"):
        to_timm(model, "vit_b_16", out, img_size=(16, 16))
    with pytest.raises(CheckpointError, match="inserted attention blocks, which timm's vit_tiny_patch16_224 does not have"):
        to_timm(model, "vit_tiny_patch16_224", out, img_size=(16, 16), inserted=True)
    kwargs = {k: v for k, v in VIT_KW.items() if k not in ("num_classes", "img_size")}
    with pytest.raises(CheckpointError, match=r"does not fit timm's model \(Missing key\(s\) in state_dict: \"pos_embed\""):
        to_timm(type(model)(**{**VIT_KW, "pos_embed": "rope"}), "vit_tiny_patch16_224", out, img_size=(16, 16),
                kwargs=kwargs)  # rope: timm's ViT has a learned position table
    with pytest.raises(CheckpointError, match="the peer computes other outputs"):  # post-norm blocks: the same keys
        to_timm(type(model)(**{**VIT_KW, "block": "post"}), "vit_tiny_patch16_224", out, img_size=(16, 16),
                kwargs=kwargs)
    assert not out.exists()
    assert main(["convert", str(run), "--to", "timm"]) == 2
    assert "say where to write it with -o OUT.safetensors" in capsys.readouterr().err


def test_to_transformers_loads_with_auto_model_for_image_classification(run, tmp_path, capsys):
    import transformers

    out = tmp_path / "hf"
    assert main(["convert", str(run), "--to", "transformers", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out} for transformers (checked in transformers: largest difference" in printed
    assert f"AutoModelForImageClassification.from_pretrained('{out}')" in printed
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    peer = transformers.AutoModelForImageClassification.from_pretrained(out).eval()
    assert type(peer).__name__ == "ViTForImageClassification" and peer.config.id2label[3] == "3"
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(peer(pixel_values=x).logits, _ours(run, x), atol=1e-4, rtol=0)
    before = (out / "model.safetensors").read_bytes()
    other = type(peer.base_model).__name__  # a model the peer computes otherwise: refused, the old folder kept
    post_norm = vision_attn.create_model("vit_tiny_patch16_224", **{**VIT_KW, "block": "post"}).eval()
    with pytest.raises(CheckpointError, match="PostNormBlock .* which transformers' ViT, DeiT and DINOv2 lack"):
        to_transformers(post_norm, "vit_tiny_patch16_224", out, img_size=(16, 16))
    assert (out / "model.safetensors").read_bytes() == before and other == "ViTModel"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "run"]  # no temporary folder left


def test_to_transformers_without_transformers_writes_nothing_unless_unchecked(run, tmp_path, capsys, monkeypatch):
    import importlib.util

    from tests.cli_errors import one_line_error

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else find_spec(name, *a))
    out = tmp_path / "hf"
    assert main(["convert", str(run), "--to", "transformers", "-o", str(out)]) == 2
    one_line_error(capsys.readouterr().err, "transformers is not installed here", "nothing was written", "--unchecked")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert main(["convert", str(run), "--to", "transformers", "-o", str(out), "--unchecked"]) == 0
    assert "NOT checked: transformers is not installed here; written because --unchecked was given" in " ".join(
        capsys.readouterr().out.split())
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
