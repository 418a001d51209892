"""`data.augment: device`: colour jitter, RandAugment and random erasing on the training batch where it
is (vision_attn/data/device_augment.py) instead of per image in the loader workers.

(a) each operation gives the pixels of the albumentations step it replaces (the loader's pipeline),
at the same parameters, exactly (warps and a saturation blend: within one grey level at a few pixels,
rounding ties); two geometric operations
compose into one resampling close to albumentations' two; (b) the draws: jitter on 80% of the
images, each RandAugment operation chosen n/11 of the time, erasing on p of them with the areas of
albumentations' ``Erasing`` (a two-sample test); the same seed gives the same batch; (c) the data
module: the workers' batches are uint8 crops without the pixel augmentations, a training batch is
augmented and normalised in the hook, a validation batch only normalised; a bad combination is a
one-line error; (d) `train cls --data.augment device` killed mid-epoch and resumed equals the
uninterrupted run."""
from __future__ import annotations

import signal
from types import SimpleNamespace

import albumentations as A
import cv2
import numpy as np
import pytest
import torch
from scipy.stats import ks_2samp

from tests.cli_errors import one_line_error
from tests.folders import make_folder
from tests.tasks.resume_helpers import assert_same_run, progress_step, stop_at, train_here
from vision_attn.cli import main
from vision_attn.data.device_augment import RAND_AUGMENT_OPS, DeviceAugment, _cdf_stretch, _grey, _lut8, _uint8
from vision_attn.errors import ConfigError
from vision_attn.tasks.classify.data import ClassificationDataModule


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    """A smooth 48x64 RGB image (photo-like: a bicubic upscale of random pixels)."""
    rng = np.random.default_rng(0)
    return cv2.resize(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8), (64, 48), interpolation=cv2.INTER_CUBIC)


def _batch(img: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(img).permute(2, 0, 1)[None].float()


def _array(x: torch.Tensor) -> np.ndarray:
    return x[0].permute(1, 2, 0).numpy().astype(np.uint8)


def _warp(img: np.ndarray, ops: list[tuple[int, float]], interpolation: str = "bicubic") -> np.ndarray:
    params = [torch.zeros(1) for _ in range(5)]
    for op, value in ops:
        params[op] = torch.tensor([value])
    chosen = torch.tensor([[op for op, _ in ops]])
    return _array(DeviceAugment(interpolation=interpolation).warp(_batch(img), chosen, chosen < 5, tuple(params)))


# ------------------------------------------------------------------ (a) the operations
GEOMETRIC = [
    (0, 20.0, {"rotate": (20, 20)}),
    (1, -12.0, {"shear": {"x": (-12, -12), "y": (0, 0)}}),
    (2, 15.0, {"shear": {"x": (0, 0), "y": (15, 15)}}),
    (3, 0.13, {"translate_percent": {"x": (0.13, 0.13), "y": (0, 0)}}),
    (4, -0.3, {"translate_percent": {"x": (0, 0), "y": (-0.3, -0.3)}}),
]


@pytest.mark.parametrize("interpolation", ["bicubic", "bilinear"])
@pytest.mark.parametrize("op,value,kwargs", GEOMETRIC, ids=RAND_AUGMENT_OPS[:5])
def test_each_geometric_operation_gives_albumentations_pixels(image, op, value, kwargs, interpolation):
    flag = cv2.INTER_CUBIC if interpolation == "bicubic" else cv2.INTER_LINEAR
    want = A.Affine(**kwargs, interpolation=flag, p=1.0)(image=image)["image"]
    diff = np.abs(_warp(image, [(op, value)], interpolation).astype(int) - want.astype(int))
    assert diff.max() <= 1 and diff.mean() < 1e-3  # a rounding tie at a pixel or two


def test_two_geometric_operations_resample_once_close_to_albumentations_twice(image):
    twice = A.Affine(translate_percent={"x": (0, 0), "y": (0.1, 0.1)}, interpolation=cv2.INTER_CUBIC, p=1.0)(
        image=A.Affine(rotate=(10, 10), interpolation=cv2.INTER_CUBIC, p=1.0)(image=image)["image"])["image"]
    once = _warp(image, [(0, 10.0), (4, 0.1)])
    inside = (slice(10, -10), slice(10, -10))  # away from the zero border
    diff = np.abs(once.astype(int) - twice.astype(int))[inside]
    assert diff.mean() < 1.5 and not np.array_equal(once, twice)  # one resampling blurs less than two


def test_each_colour_operation_gives_albumentations_pixels(image):
    x = _batch(image)
    cases = {
        "equalize": (A.Equalize(p=1.0), _cdf_stretch(x)),
        "autocontrast": (A.AutoContrast(p=1.0), _cdf_stretch(x, autocontrast=True)),
        "posterize": (A.Posterize(num_bits=(3, 3), p=1.0), torch.div(x, 32, rounding_mode="floor") * 32),
        "solarize": (A.Solarize(threshold_range=(0.6, 0.6), p=1.0), torch.where(x >= 0.6 * 255, 255 - x, x)),
        "sharpen": (A.Sharpen(alpha=(0.5, 0.5), lightness=(0.7, 0.7), p=1.0),
                    DeviceAugment.sharpen(x.clone(), torch.tensor([0.5]), torch.tensor([0.7]))),
        "brightness_contrast": (A.RandomBrightnessContrast(brightness_limit=(0.1, 0.1), contrast_limit=(0.2, 0.2),
                                                           p=1.0), _lut8(x * 1.2 + 0.1 * 255)),
        "brightness": (A.ColorJitter(brightness=(1.3, 1.3), contrast=(1, 1), saturation=(1, 1), hue=(0, 0), p=1.0),
                       _lut8(x * 1.3)),
        "contrast": (A.ColorJitter(brightness=(1, 1), contrast=(0.7, 0.7), saturation=(1, 1), hue=(0, 0), p=1.0),
                     _lut8(x * 0.7 + _grey(x).mean(dim=(2, 3), keepdim=True) * 0.3)),
    }
    for name, (transform, ours) in cases.items():
        assert np.array_equal(_array(ours), transform(image=image)["image"]), name
    for f in (0.6, 1.37):  # OpenCV's addWeighted: a tie may round the other way
        jitter = A.ColorJitter(brightness=(1, 1), contrast=(1, 1), saturation=(f, f), hue=(0, 0), p=1.0)
        want = jitter(image=image)["image"]
        diff = np.abs(_array(_uint8(x * f + _grey(x) * (1 - f))).astype(int) - want.astype(int))
        assert diff.max() <= 1 and diff.mean() < 0.01
    assert np.array_equal(_array(_grey(x))[..., 0], cv2.cvtColor(image, cv2.COLOR_RGB2GRAY))


# ------------------------------------------------------------------ (b) the draws
def test_the_draws_follow_the_loader_pipelines_probabilities(monkeypatch):
    b, n = 2000, 2
    aug = DeviceAugment(color_jitter=0.4, rand_augment=n, rand_augment_magnitude=9, random_erasing=0.25)
    calls: dict[str, torch.Tensor] = {}
    original = DeviceAugment.rand_augment

    def spy(self, x, chosen, g):
        calls["chosen"] = chosen
        return original(self, x, chosen, g)

    monkeypatch.setattr(DeviceAugment, "rand_augment", spy)
    flat = torch.full((b, 3, 8, 8), 100, dtype=torch.uint8)
    out = aug.augment(flat, seed=5)
    chosen = calls["chosen"]
    assert chosen.shape == (b, n) and bool((chosen[:, 0] < chosen[:, 1]).all())  # distinct, in the list's order
    share = torch.bincount(chosen.flatten(), minlength=11).float() / b
    assert torch.allclose(share, torch.full((11,), n / 11), atol=0.035)
    assert out.dtype == torch.float32 and out.min() >= 0 and out.max() <= 255 and bool((out == out.round()).all())
    assert torch.equal(out, aug.augment(flat, seed=5)) and not torch.equal(out, aug.augment(flat, seed=6))

    jitter_only = DeviceAugment(color_jitter=0.4)
    changed = (jitter_only.augment(flat, seed=1) != 100).flatten(1).any(1).float().mean()
    assert abs(changed - 0.8) < 0.03  # ColorJitter's p (factors of exactly 1 are improbable)


def test_erasing_draws_albumentations_areas():
    """The erased fraction of a 32x40 image: ours against albumentations' Erasing, 1,500 draws each."""
    b, h, w = 1500, 32, 40
    ours = DeviceAugment(color_jitter=0.0, random_erasing=1.0).augment(torch.zeros(b, 3, h, w, dtype=torch.uint8), 0)
    ours_area = (ours != 0).any(1).flatten(1).float().mean(1).numpy()
    erasing = A.Erasing(scale=(0.02, 1 / 3), ratio=(0.3, 3.3), fill=255, p=1.0)
    erasing.set_random_seed(0)
    blank = np.zeros((h, w, 3), np.uint8)
    theirs = np.array([(erasing(image=blank)["image"][..., 0] > 0).mean() for _ in range(b)])
    assert ks_2samp(ours_area, theirs).pvalue > 0.01
    half = DeviceAugment(color_jitter=0.0, random_erasing=0.5).augment(torch.zeros(b, 3, h, w, dtype=torch.uint8), 1)
    assert abs((half != 0).flatten(1).any(1).float().mean() - 0.5) < 0.05


# ------------------------------------------------------------------ (c) the data module
def test_the_workers_crop_and_the_hook_augments_training_batches(tmp_path):
    root = make_folder(tmp_path / "data", n_train=8, n_val=2)
    dm = ClassificationDataModule(root=str(root), img_size=16, batch_size=8, num_workers=0, augment="device",
                                  rand_augment=2, random_erasing=0.25, hflip=0.0, seed=3)
    dm.setup("fit")
    loader_steps = [type(t).__name__ for t in dm.train_set.transform.compose.transforms]
    assert loader_steps == ["RandomResizedCrop", "Normalize", "ToTensorV2"]  # normalised on the device
    x, y = next(iter(dm.train_dataloader()))
    assert x.dtype == torch.uint8 and x.shape[1:] == (3, 16, 16)
    position = SimpleNamespace(current=SimpleNamespace(completed=4))
    trainer = SimpleNamespace(training=True, global_rank=0, current_epoch=1, num_training_batches=6,
                              precision_plugin=SimpleNamespace(
        convert_input=lambda t: t), fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=position)))
    dm.trainer = trainer
    trained = dm.on_after_batch_transfer((x, y), 0)[0]
    assert trained.dtype == torch.float32 and not torch.equal(trained, dm.pixels(x))
    assert torch.equal(trained, dm.on_after_batch_transfer((x, y), 0)[0])  # a function of the position
    position.current.completed = 5
    assert not torch.equal(trained, dm.on_after_batch_transfer((x, y), 0)[0])
    trainer.training = False  # validation: normalised only
    assert torch.equal(dm.on_after_batch_transfer((x, y), 0)[0], dm.pixels(x))


def test_bad_augment_settings_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(ConfigError, match="data.augment=device augments the uint8 batch on the device: set "
                                          "data.normalize: device too"):
        ClassificationDataModule(augment="device", normalize="loader")
    with pytest.raises(ConfigError, match="rand_augment=12: give 0..11"):
        DeviceAugment(rand_augment=12)
    with pytest.raises(ConfigError, match="takes a \\(B, 3, H, W\\) uint8 batch"):
        DeviceAugment()(torch.zeros(1, 3, 4, 4), 0)
    root = make_folder(tmp_path / "data", n_train=8, n_val=2)
    capsys.readouterr()
    assert main(["train", "cls", "--data.root", str(root), "--runs_dir", str(tmp_path / "runs"), "--name", "bad",
                 "--data.augment", "gpu"]) == 2
    one_line_error(capsys.readouterr().err, "data.augment", "loader", "device")
    assert not (tmp_path / "runs" / "bad").exists()


# ------------------------------------------------------------------ (d) resume
def _args(runs, root, name):
    return ["train", "cls", "--name", name, "--runs_dir", str(runs), "--data.root", str(root),
            "--data.img_size", "16", "--data.batch_size", "8", "--data.num_workers", "0", "--data.augment", "device",
            "--data.rand_augment", "2", "--data.random_erasing", "0.5", "--model.warmup_epochs", "1",
            "--model.model_kwargs", "{patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2}",
            "--trainer.accelerator", "cpu", "--trainer.max_epochs", "2", "--trainer.log_every_n_steps", "1",
            "--trainer.enable_progress_bar", "false", "--threads", "1", "--checkpoint.every_n_steps", "1"]


def test_device_augmented_training_killed_mid_epoch_resumes_to_the_uninterrupted_run(tmp_path, capsys):
    root = make_folder(tmp_path / "data", n_train=16, n_val=4)  # 48 images: 6 steps an epoch
    train_here(_args(tmp_path / "runs", root, "reference"), capsys)
    run = tmp_path / "runs" / "killed"
    killed = stop_at(_args(tmp_path / "runs", root, "killed"), tmp_path, run, 8, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL and 8 <= progress_step(run) < 12
    train_here(_args(tmp_path / "runs", root, "killed") + ["--resume", "true"], capsys)
    assert_same_run(tmp_path / "runs" / "reference", run, ("val_top1", "val_loss", "train_loss"))
