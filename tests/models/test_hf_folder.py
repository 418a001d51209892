"""A transformers folder read as data: refusals that name the file and what is wrong, sharded weights,
the weights file given instead of the folder, training from a folder, and the memory a large file
takes (the families' outputs against transformers are in test_hf_vit.py, test_hf_swin.py and
test_hf_clip.py)."""
import json
from pathlib import Path

import pytest
import torch
import transformers
import yaml

from tests.checkpoints import classifier_checkpoint
from tests.folders import make_folder
from vision_attn import create_model
from vision_attn.cli import main
from vision_attn.errors import CheckpointError
from vision_attn.models.clip import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from vision_attn.tasks import load_run, train_classifier
from vision_attn.tasks.classify.network import pretrained_normalisation


def _vit_folder(path: Path, num_labels: int = 3) -> Path:
    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                    image_size=32, patch_size=8, num_labels=num_labels)
    transformers.ViTForImageClassification(config).save_pretrained(path)
    return path


def _edit_config(folder: Path, **changes) -> Path:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))
    return path


def _peer_logits(folder: Path, x: torch.Tensor) -> torch.Tensor:
    peer = transformers.AutoModelForImageClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        return peer(pixel_values=x).logits


def test_a_config_that_asks_for_the_folders_own_code_is_refused(tmp_path):
    folder = _vit_folder(tmp_path / "m")
    config = _edit_config(folder, auto_map={"AutoModel": "modeling_mine.MyModel"})
    with pytest.raises(CheckpointError, match=rf"^{config}: asks for the folder's own code \(auto_map: "):
        create_model(pretrained=folder)


def test_an_architecture_vision_attn_does_not_have_is_named(tmp_path):
    folder = _vit_folder(tmp_path / "m")
    config = _edit_config(folder, model_type="beit")
    with pytest.raises(CheckpointError, match=rf"^{config}: model_type 'beit' is not an architecture vision_attn has "
                                              r"\(it reads .*\bvit\b"):
        create_model(pretrained=folder)


def test_config_sizes_that_disagree_with_the_weights_name_the_file_and_the_keys(tmp_path):
    folder = _vit_folder(tmp_path / "m")
    _edit_config(folder, intermediate_size=96)
    with pytest.raises(CheckpointError, match=r"model\.safetensors \(with .*config\.json\): does not fit .*shape "
                                              r"mismatch: .*blocks\.0\.mlp\.fc1\.weight: file \(64, 32\) vs model \(96, 32\)"
                                              r".*the config's sizes and the weights disagree"):
        create_model(pretrained=folder)


def test_a_truncated_weights_file_is_named(tmp_path):
    folder = _vit_folder(tmp_path / "m")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=rf"^{weights}: not a readable checkpoint .*truncated"):
        create_model(pretrained=folder)


def test_a_folder_without_weights_and_a_shard_index_that_lists_missing_files(tmp_path):
    folder = _vit_folder(tmp_path / "m")
    (folder / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"a transformers folder without weights: none of model\.safetensors"):
        create_model(pretrained=folder)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors"}}))
    with pytest.raises(CheckpointError, match=r"lists shard\(s\) model-00001-of-00002\.safetensors that are not in"):
        create_model(pretrained=folder)


def test_sharded_weights_and_the_weights_file_itself_load_the_same_model(tmp_path):
    folder = _vit_folder(tmp_path / "one")
    sharded = tmp_path / "sharded"
    transformers.AutoModelForImageClassification.from_pretrained(folder).save_pretrained(sharded, max_shard_size="20KB")
    assert len(list(sharded.glob("model-*.safetensors"))) > 1 and (sharded / "model.safetensors.index.json").is_file()
    x = torch.randn(2, 3, 32, 32)
    expected = _peer_logits(folder, x)
    for source in (folder, folder / "model.safetensors", sharded):
        with torch.no_grad():
            got = create_model(pretrained=source).eval()(x)
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_a_timm_hub_folder_is_not_read_as_transformers(tmp_path):
    folder = tmp_path / "timm_hub"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_tiny_patch16_224", "num_classes": 10}))
    with pytest.raises(CheckpointError, match="no such checkpoint: a folder without best.ckpt"):
        create_model("vit_tiny_patch16_224", pretrained=folder)
    with pytest.raises(Exception, match="give a model name"):
        create_model(pretrained=folder)


def test_train_cls_from_a_folder_without_a_model_name_records_its_sizes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    folder = _vit_folder(tmp_path / "hf", num_labels=5)
    root = make_folder(tmp_path / "data")  # 3 classes: the file's 5-class head is replaced
    config = tmp_path / "ft.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"pretrained": str(folder), "warmup_epochs": 0},
        "data": {"root": str(root), "img_size": 16, "batch_size": 8, "num_workers": 0},
        "trainer": {"accelerator": "cpu", "max_epochs": 1}}))
    with pytest.warns(UserWarning, match=r"the classifier in the file \(head\.weight \(5, 32\).*re-initialised"):
        assert main(["train", "cls", "--config", str(config)]) == 0
    assert "model: vit_tiny_patch16_224," in capsys.readouterr().out  # the closest variant to its sizes
    run = load_run(tmp_path / "runs" / "ft")
    assert run.hparams["name"] == "vit_tiny_patch16_224"
    assert run.hparams["model_kwargs"]["embed_dim"] == 32 and run.hparams["model_kwargs"]["depth"] == 1
    assert run.model.patch_embed.grid_size == (2, 2) and run.model.num_classes == 3  # 16 px, the data's size


def test_a_linear_probe_from_a_folder_trains_the_head_alone_normalised_as_the_processor_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = _vit_folder(tmp_path / "hf", num_labels=3)
    (folder / "preprocessor_config.json").write_text(json.dumps({"image_mean": [0.5, 0.4, 0.3],
                                                                 "image_std": [0.2, 0.25, 0.3]}))
    root = make_folder(tmp_path / "data")
    result = train_classifier({"name": "probe", "model": {"pretrained": str(folder), "freeze": "backbone",
                                                          "lr": 0.1, "warmup_epochs": 0, "ema_decay": None},
                               "data": {"root": str(root), "img_size": 32, "batch_size": 8, "num_workers": 0},
                               "trainer": {"accelerator": "cpu", "max_epochs": 1, "enable_progress_bar": False}})
    run = load_run(result.run_dir)
    assert tuple(run.data_hparams["mean"]) == (0.5, 0.4, 0.3) and tuple(run.data_hparams["std"]) == (0.2, 0.25, 0.3)
    start = create_model(pretrained=folder).state_dict()
    trained = run.model.state_dict()
    changed = sorted(k for k in start if not torch.equal(start[k], trained[k]))
    assert changed == ["head.bias", "head.weight"]  # the backbone kept the folder's weights


def test_cli_refusal_is_one_line_with_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = _vit_folder(tmp_path / "hf")
    config = _edit_config(folder, trust_remote_code=True)
    root = make_folder(tmp_path / "data")
    assert main(["train", "cls", "--model.pretrained", str(folder), "--data.root", str(root),
                 "--data.img_size", "16", "--data.num_workers", "0", "--trainer.max_epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {config}: asks for the folder's own code (trust_remote_code")


def test_the_normalisation_of_a_checkpoint_comes_from_where_it_was_trained(tmp_path):
    weights = tmp_path / "clip.pt"
    weights.write_bytes(b"")  # a state dict file: the name's configuration says
    assert pretrained_normalisation("vit_base_patch16_clip_224", str(weights)) == {"mean": OPENAI_CLIP_MEAN,
                                                                                   "std": OPENAI_CLIP_STD}
    (tmp_path / "run").mkdir()
    run = classifier_checkpoint(tmp_path / "run" / "best.ckpt").parent  # a run of ours: what it trained with
    assert pretrained_normalisation("vit_tiny_patch16_224", str(run)) == {"mean": (0.485, 0.456, 0.406),
                                                                          "std": (0.229, 0.224, 0.225)}
    (run / "model.safetensors").write_bytes(b"")  # the run's weights file: the same, not the name's 0.5
    assert pretrained_normalisation("vit_tiny_patch16_224", str(run / "model.safetensors")) == \
        pretrained_normalisation("vit_tiny_patch16_224", str(run))
