"""`data.normalize`: classification images go through the loader as uint8 and are normalised on the
training device (``device``, the default), or normalised in the loader as float32 (``loader``).

(a) the loaders' batches: uint8 (B, 3, H, W) with ``device``, float32 with ``loader``, and the data
module's on_after_batch_transfer makes the first the second exactly (folders and shards, ImageNet's
and a YOLO classifier's normalisation, a precision that converts the input); a pipeline whose
normalisation is not exact keeps float32 batches, which the hook leaves alone; (b) `train cls` with
either gives the same weights and metrics.json on the CPU; (c) a bad value is a one-line error
naming data.normalize; (d) eval cls and predict cls on a run trained with ``device``."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from pytorch_lightning.plugins.precision import HalfPrecision

from tests.cli_errors import one_line_error
from tests.folders import make_folder, write_image
from tests.tasks.resume_helpers import max_weight_difference
from vision_attn.cli import main
from vision_attn.data.normalize import PixelNormalize
from vision_attn.data.shards import pack_shards
from vision_attn.errors import ConfigError
from vision_attn.tasks.classify.data import ClassificationDataModule

TINY_VIT = "{patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2, drop_rate: 0.1, drop_path_rate: 0.1}"
CLS_METRICS = ("val_top1", "val_top5", "val_loss", "train_loss", "best_val_top1", "per_class_accuracy", "global_step")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """4 classes: 16x16 PNGs (8 train, 3 val each) and 48x48 JPEGs (2 train, 1 val each: decoded at
    reduced size where the crop allows)."""
    root = make_folder(tmp_path_factory.mktemp("norm") / "folder", classes=("cat", "dog", "fox", "owl"))
    for label, name in enumerate(("cat", "dog", "fox", "owl")):
        for split, n in (("train", 2), ("val", 1)):
            for i in range(n):
                write_image(root / split / name / f"big_{i}.jpg", label, size=48, seed=77 + 10 * label + i, fmt="JPEG")
    return root


@pytest.fixture(scope="module")
def shards(folder, tmp_path_factory) -> Path:
    return pack_shards(folder, tmp_path_factory.mktemp("norm_packed") / "shards", shard_size=8).root


def _module(root: Path, normalize: str, **kw) -> ClassificationDataModule:
    dm = ClassificationDataModule(root=str(root), img_size=16, batch_size=8, num_workers=0, normalize=normalize,
                                  rand_augment=1, random_erasing=0.25, seed=3, **kw)
    dm.setup("fit")
    return dm


def _batches(dm: ClassificationDataModule) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [*dm.train_dataloader(), *dm.val_dataloader()]


# ------------------------------------------------------------------ (a) the batches
@pytest.mark.parametrize("source", ["folder", "shards"])
@pytest.mark.parametrize("norm", [{}, {"mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0)}], ids=["imagenet", "yolo"])
def test_uint8_batches_normalised_on_the_device_equal_the_loaders(source, norm, request):
    root = request.getfixturevalue(source)
    on_device, in_loader = _module(root, "device", **norm), _module(root, "loader", **norm)
    device_batches, loader_batches = _batches(on_device), _batches(in_loader)
    assert len(device_batches) == len(loader_batches) == 5 + 1  # 40 train images in 5 batches, 16 val in 1
    for (xd, yd), (xl, yl) in zip(device_batches, loader_batches):
        assert xd.dtype == torch.uint8 and xd.is_contiguous() and xd.shape[1:] == (3, 16, 16)
        assert xl.dtype == torch.float32 and xl.shape == xd.shape
        moved_d = on_device.on_after_batch_transfer((xd, yd), 0)
        moved_l = in_loader.on_after_batch_transfer((xl, yl), 0)
        assert moved_l[0] is xl  # a float batch as it is
        assert moved_d[0].dtype == torch.float32 and torch.equal(moved_d[0], xl) and torch.equal(moved_d[1], yl)


def test_the_hook_applies_the_precisions_input_conversion(folder):
    """Lightning converts a float batch to a true-half precision's dtype before the copy; the hook
    does it to the batch it normalises."""
    on_device, in_loader = _module(folder, "device"), _module(folder, "loader")
    plugin = HalfPrecision("bf16-true")
    x, y = next(iter(on_device.train_dataloader()))
    on_device.trainer = SimpleNamespace(precision_plugin=plugin)
    x_loader = plugin.convert_input(next(iter(in_loader.train_dataloader()))[0])
    out = on_device.on_after_batch_transfer((x, y), 0)[0]
    assert out.dtype == torch.bfloat16 and torch.equal(out, x_loader)


def test_a_pipeline_whose_normalisation_is_not_exact_keeps_float_batches(folder):
    on_device, in_loader = _module(folder, "device"), _module(folder, "loader")
    for dm in (on_device, in_loader):
        dm.train_set.transform.exact = False  # the look-up table's values: not what PixelNormalize gives
    xd, xl = (next(iter(dm.train_dataloader()))[0] for dm in (on_device, in_loader))
    assert xd.dtype == torch.float32 and torch.equal(xd, xl)
    assert on_device.on_after_batch_transfer((xd, None), 0)[0] is xd


def test_pixel_normalize_is_the_normalize_steps_float32_arithmetic():
    pixels = PixelNormalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    x = torch.randint(0, 256, (2, 3, 5, 7), dtype=torch.uint8)
    want = (x.float() - pixels.sub) * pixels.mul
    assert torch.equal(pixels(x), want) and pixels(want) is want
    with pytest.raises(ConfigError, match="data.normalize='gpu': choose one of device, loader"):
        ClassificationDataModule(root="demo:digits", normalize="gpu")


# ------------------------------------------------------------------ (b, c, d) train cls, eval cls, predict cls
def _train_args(runs: Path, root: Path, name: str, *extra: str) -> list[str]:
    return ["train", "cls", "--name", name, "--runs_dir", str(runs), "--data.root", str(root),
            "--data.img_size", "16", "--data.batch_size", "8", "--data.num_workers", "0",
            "--data.rand_augment", "1", "--model.mixup", "0.5", "--model.cutmix", "1.0", "--model.ema_decay", "0.9",
            "--model.warmup_epochs", "1", "--model.model_kwargs", TINY_VIT, "--trainer.accelerator", "cpu",
            "--trainer.max_epochs", "1", "--trainer.log_every_n_steps", "1", "--trainer.enable_progress_bar", "false",
            "--threads", "1", *extra]


def test_training_on_the_device_equals_the_loader_then_eval_and_predict(folder, tmp_path, capsys):
    runs = tmp_path / "runs"
    for mode in ("device", "loader"):
        capsys.readouterr()
        assert main(_train_args(runs, folder, mode, "--data.normalize", mode)) == 0, capsys.readouterr().err
    a, b = (json.loads((runs / n / "metrics.json").read_text()) for n in ("device", "loader"))
    assert a["global_step"] == 5
    for key in CLS_METRICS:
        assert a[key] == b[key], key
    assert max_weight_difference(runs / "device", runs / "loader") == 0.0
    for mode in ("device", "loader"):  # recorded as the other data settings are
        assert yaml.safe_load((runs / mode / "config.yaml").read_text())["data"]["normalize"] == mode
        ckpt = torch.load(runs / mode / "best.ckpt", map_location="cpu", weights_only=True)
        assert ckpt["datamodule_hyper_parameters"]["normalize"] == mode

    capsys.readouterr()
    run = runs / "device"
    assert main(["eval", "cls", "--checkpoint", str(run / "best.ckpt"), "--data", str(folder), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == 16 and 0 <= report["top1"] <= report["top5"] <= 1
    assert main(["predict", "cls", "--checkpoint", str(run), str(folder / "val" / "dog"), "--top-k", "2", "--json"]) == 0
    preds = json.loads(capsys.readouterr().out)
    assert len(preds) == 4 and all(len(p["top"]) == 2 and 0 <= p["top"][0]["prob"] <= 1 for p in preds)


def test_a_bad_normalize_value_is_a_one_line_error(folder, tmp_path, capsys):
    capsys.readouterr()
    assert main(_train_args(tmp_path / "runs", folder, "bad", "--data.normalize", "gpu")) == 2
    one_line_error(capsys.readouterr().err, "data.normalize", "device", "loader")
    assert not (tmp_path / "runs" / "bad").exists()
