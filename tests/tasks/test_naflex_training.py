"""``data.naflex``: classification trained on patch sequences at each image's own aspect ratio within a
token budget (timm's NaFlex loader's batches), through the classification data module."""
from __future__ import annotations

import json

import pytest
import torch

from vision_attn.data.naflex import NaFlexBatch, NaFlexCollate
from vision_attn.errors import ConfigError
from vision_attn.tasks import train_classifier
from vision_attn.tasks.classify.run import evaluate_classifier, predict_images
from vision_attn.tasks.classify.data import ClassificationDataModule

TINY = {
    "model": {"name": "vit_tiny_patch16_224", "model_kwargs": {"patch_size": 4, "depth": 1, "embed_dim": 32,
                                                                 "num_heads": 2, "global_pool": "avg"},
              "warmup_epochs": 0},
    "data": {"root": "demo:digits", "img_size": 16, "batch_size": 16, "num_workers": 0, "hflip": 0.0,
             "color_jitter": 0.0, "naflex": 12, "naflex_patch": 4},
    "trainer": {"accelerator": "cpu", "max_epochs": 1, "enable_progress_bar": False, "limit_train_batches": 3,
                "limit_val_batches": 2},
}


def test_a_naflex_run_trains_on_digits_and_records_its_budget(tmp_path):
    result = train_classifier({**TINY, "name": "naflex", "runs_dir": str(tmp_path / "runs")})
    metrics = json.loads((result.run_dir / "metrics.json").read_text())
    assert metrics["naflex"] == {"max_patches": 12, "patch": 4}
    assert 0.0 <= metrics["val_top1"] <= 1.0 and metrics["train_loss"] > 0
    assert "naflex: 12" in (result.run_dir / "config.yaml").read_text()
    data = ClassificationDataModule(**TINY["data"])
    data.setup("fit")
    batch, labels = next(iter(data.train_dataloader()))  # what the model trained on: 8x8 digits as 3x3 patches
    assert isinstance(batch, NaFlexBatch) and batch.patches.shape == (16, 9, 48) and labels.shape == (16,)
    assert (batch.shapes == torch.tensor([3, 3])).all()
    # eval and predict of the run take NaFlex batches too: the validation top-1 again
    report = evaluate_classifier(result.run_dir / "last.ckpt", "demo:digits", batch_size=64)
    assert report["images"] == 359 and 0.0 <= report["top1"] <= 1.0
    path = next((data.splits.root / "val").rglob("*.png"))
    assert len(predict_images(result.run_dir / "last.ckpt", [path], top_k=3)[0]["top"]) == 3


def test_the_collate_batches_images_of_other_aspect_ratios():
    g = torch.Generator().manual_seed(0)
    items = [(torch.rand(3, 20, 60, generator=g), 1), (torch.rand(3, 50, 10, generator=g), 0)]
    batch, labels = NaFlexCollate(patch=4, max_patches=12)(items)
    assert isinstance(batch, NaFlexBatch) and labels.tolist() == [1, 0]
    assert batch.shapes.tolist() == [[2, 6], [6, 2]]  # 1:3 and 5:1 (as near as 12 patches allow)
    assert batch.patches.shape == (2, 12, 4 * 4 * 3) and batch.mask.all()
    short, _ = NaFlexCollate(patch=4, max_patches=12)([(torch.rand(3, 8, 8, generator=g), 0), items[0]])
    assert short.shapes.tolist() == [[3, 3], [2, 6]] and short.mask.sum(1).tolist() == [9, 12]  # padded: 3 of 12


def test_naflex_refuses_device_augmentation():
    with pytest.raises(ConfigError, match="data.naflex"):
        ClassificationDataModule(naflex=16, augment="device")


BUDGET = {"max_tokens_per_batch": 72, "train_seq_lens": [4, 9], "batch_divisor": 4}


def _budget_data(**overrides) -> ClassificationDataModule:
    data = ClassificationDataModule(**{**TINY["data"], "naflex": BUDGET, "naflex_patch": None, **overrides})
    data.setup("fit")
    return data


def test_a_token_budget_run_trains_on_digits_and_records_its_budget(tmp_path):
    data = {k: v for k, v in TINY["data"].items() if k != "naflex_patch"}  # the patch size: the model's
    result = train_classifier({**TINY, "data": {**data, "naflex": BUDGET}, "name": "budget",
                               "runs_dir": str(tmp_path / "runs")})
    metrics = json.loads((result.run_dir / "metrics.json").read_text())
    dm = _budget_data(naflex_patch=4)
    plan = dm.budget.schedule(len(dm.train_set), 0)
    assert sum(size for _, size in plan) == metrics["train_images"] == len(dm.train_set)  # every image, once
    assert metrics["naflex"] == {"max_tokens_per_batch": 72, "train_seq_lens": [4, 9], "max_seq_len": 9,
                                 "batch_divisor": 4, "patch": 4,
                                 "batches_per_seq_len": {"4": sum(s == 4 for s, _ in plan),
                                                         "9": sum(s == 9 for s, _ in plan)}}
    assert min(metrics["naflex"]["batches_per_seq_len"].values()) > 10 and metrics["train_loss"] > 0
    assert "max_tokens_per_batch: 72" in (result.run_dir / "config.yaml").read_text()
    report = evaluate_classifier(result.run_dir / "last.ckpt", "demo:digits", batch_size=64)  # at max_seq_len 9
    assert report["images"] == 359 and 0.0 <= report["top1"] <= 1.0


def test_budget_batches_follow_the_rule_and_a_resumed_epoch_loads_the_same_batches():
    dm = _budget_data()
    loader = dm.train_dataloader()
    loader.batch_sampler.sampler.set_epoch(1)  # what Lightning does before an epoch
    first = [b for b, _ in zip(loader, range(4))]
    for batch, labels in first:
        B, N = batch.mask.shape
        assert N in (4, 9) and B * N <= 72 and B == labels.shape[0] and B % 4 == 0
        assert batch.mask.sum(1).tolist() == batch.shapes.prod(1).tolist()
    assert len(loader) == len(dm.budget.schedule(len(dm.train_set), 0))
    resumed = _budget_data()
    resumed.load_state_dict({"position": [1, 2]})  # a checkpoint written after 2 batches of epoch 1
    again = [b for b, _ in zip(resumed.train_dataloader(), range(2))]
    for (b1, y1), (b2, y2) in zip(first[2:], again):
        assert torch.equal(y1, y2) and torch.equal(b1.patches, b2.patches) and torch.equal(b1.mask, b2.mask)
    workers = _budget_data(num_workers=1, persistent_workers=False).train_dataloader()
    workers.batch_sampler.sampler.set_epoch(1)
    for (b1, y1), (b2, y2) in zip(first, workers):  # a worker loads the same batches
        assert torch.equal(y1, y2) and torch.equal(b1.patches, b2.patches)


def test_a_budget_refuses_a_patch_size_other_than_the_models_and_bad_keys(tmp_path):
    with pytest.raises(ConfigError, match="data.naflex_patch=8, but the model's patches are 4 px"):
        _budget_data(naflex_patch=8).use_patch(4)
    with pytest.raises(ConfigError, match="unknown config key 'data.naflex.max_tokens': did you mean "
                                          "data.naflex.max_tokens_per_batch"):
        train_classifier({**TINY, "data": {**TINY["data"], "naflex": {"max_tokens": 72}},
                          "runs_dir": str(tmp_path / "runs")})
