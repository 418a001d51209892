"""albumentations pipelines: shapes, crop_pct, strict arguments, seeded workers."""
import numpy as np
import pytest
import torch

from vision_attn.data import ImageFolder, eval_transforms, seed_worker, train_transforms
from vision_attn.data.transforms import rand_augment_ops
from vision_attn.errors import ConfigError


def _image(h=40, w=60):
    return np.random.default_rng(0).integers(0, 255, (h, w, 3), dtype=np.uint8)


def test_train_pipeline_shapes_and_normalisation():
    tf = train_transforms(32, rand_augment=2, seed=0)
    x = tf(image=_image())["image"]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32
    ident = train_transforms((24, 16), scale=(1.0, 1.0), ratio=(1.5, 1.5), hflip=0, color_jitter=0,
                             mean=(0, 0, 0), std=(1, 1, 1), seed=0)
    y = ident(image=np.full((48, 32, 3), 255, np.uint8))["image"]
    assert y.shape == (3, 24, 16) and torch.allclose(y, torch.ones_like(y))


def test_eval_pipeline_crop_pct():
    img = np.zeros((100, 100, 3), np.uint8)
    img[:, :5] = 255  # a bright border column: kept at crop_pct 1, cropped away at 0.8
    full = eval_transforms(50, crop_pct=1.0, mean=(0, 0, 0), std=(1, 1, 1))(image=img)["image"]
    cropped = eval_transforms(50, crop_pct=0.8, mean=(0, 0, 0), std=(1, 1, 1))(image=img)["image"]
    assert full.shape == cropped.shape == (3, 50, 50)
    assert full[:, :, 0].mean() > 0.9 and cropped[:, :, 0].mean() < 0.1
    assert eval_transforms((32, 48))(image=_image())["image"].shape == (3, 32, 48)


def test_every_rand_augment_op_runs():
    import albumentations as A

    for op in rand_augment_ops(9):
        out = A.Compose([op], strict=True, seed=0)(image=_image())["image"]
        assert out.shape == (40, 60, 3)


def test_bad_arguments_are_config_errors():
    with pytest.raises(ConfigError, match="crop_pct"):
        eval_transforms(32, crop_pct=0)
    with pytest.raises(ConfigError, match="interpolation"):
        train_transforms(32, interpolation="cubic")
    with pytest.raises(ConfigError, match="scale"):
        train_transforms(32, scale=(0.5, 0.1))
    with pytest.raises(ConfigError, match="rand_augment_magnitude"):
        train_transforms(32, rand_augment=1, rand_augment_magnitude=11)


def test_seeded_pipelines_repeat_and_workers_differ():
    a = train_transforms(16, seed=3)
    b = train_transforms(16, seed=3)
    img = _image()
    assert torch.equal(a(image=img)["image"], b(image=img)["image"])

    class Info:
        dataset = ImageFolder([], [], train_transforms(16, seed=3))

    outs = []
    for worker_seed in (11, 12):
        torch.manual_seed(worker_seed)
        from unittest import mock

        with mock.patch("torch.utils.data.get_worker_info", return_value=Info):
            seed_worker(0)
        outs.append(Info.dataset.transform(image=img)["image"])
    assert not torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_erasing_replaces_one_rectangle_with_random_pixels(seed):
    img = np.full((40, 40, 3), 128, np.uint8)
    kw = dict(scale=(1.0, 1.0), ratio=(1.0, 1.0), hflip=0, color_jitter=0, mean=(0, 0, 0), std=(1, 1, 1), seed=seed)
    erased = train_transforms(40, random_erasing=1.0, **kw)(image=img)["image"]
    plain = train_transforms(40, **kw)(image=img)["image"]
    changed = (erased != plain).any(0)  # (40, 40)
    ys, xs = changed.nonzero(as_tuple=True)
    box = changed[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
    assert 0.02 * 1600 * 0.9 <= box.numel() <= 1600 / 3 + 40  # 2-33% of the area, as timm
    assert box.float().mean() > 0.95  # one filled rectangle (a random pixel can equal 128/255 by chance)
    values = erased[:, changed]
    assert 0.2 < values.std() < 0.38 and values.min() >= 0 and values.max() <= 1  # uniform per pixel
    assert torch.equal(erased[:, ~changed], plain[:, ~changed])


def test_random_erasing_probability_is_checked():
    with pytest.raises(ConfigError, match=r"random_erasing=1.5: give a probability between 0 and 1"):
        train_transforms(32, random_erasing=1.5)
