"""Detection `data.augment: device` (vision_attn/data/det_device_augment.py): the workers decode, the
batch is mosaicked, warped, colour-shifted and flipped where it trains.

(a) each operation against the loader path's operation at the same parameters: letterbox + affine
(albumentations' LongestMaxSize, PadIfNeeded, Affine as DetectionTransform builds them), the loader's
own mosaic canvas + affine + centre crop, HSV, flips: the same pixels within rounding (OpenCV's
fixed-point bilinear weights against grid_sample's float ones: one grey level) and the same boxes (1e-4),
keypoints and oriented boxes (letterbox and mosaic); (b) the draws follow the loader path's
distributions (two-sample tests against albumentations' own parameter draws, no images); (c) `train det
--data.augment device` killed mid-epoch and resumed equals the uninterrupted run; bad settings are
one-line errors."""
from __future__ import annotations

import signal

import albumentations as A
import cv2
import numpy as np
import pytest
import torch
from scipy.stats import ks_2samp

from tests._configs import tiny_detection
from tests.tasks.resume_helpers import assert_same_run, progress_step, stop_at, train_here
from tests.tasks.test_exact_resume import RESUMED
from vision_attn.data import DetectionTransform, DigitBoxesConfig, collate_detection, open_detection, write_digit_boxes
from vision_attn.data.det_device_augment import DetectionDeviceAugment, DetectionItems, shift_hsv
from vision_attn.data.det_transforms import PAD_VALUE, finish_points
from vision_attn.data.digit_warps import write_digit_keypoints, write_digit_obb
from vision_attn.errors import ConfigError
from vision_attn.tasks.detect.data import DetectionDataModule
from vision_attn.tasks.segment.data import SegmentationDataModule

S = 64


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_digit_boxes(tmp_path_factory.mktemp("digits"), DigitBoxesConfig(n_train=8, n_val=2, seed=3))


def _items(root, keypoints=False, obb=False):
    ds = open_detection(str(root), "train", transform=DetectionItems(S, keypoints=keypoints, obb=obb),
                        keypoints=keypoints, obb=obb)
    return ds, collate_detection([ds[i] for i in range(len(ds))])


def _draws(n, *, mosaic=False, centre=(S, S), partners=(1, 2, 3), translate=(0.0, 0.0), shear=(0.0, 0.0),
           scale=(1.0, 1.0), rotate=0.0, hsv=(0.0, 0.0, 0.0), flips=(False, False)):
    """The same parameters for every image (what DetectionDeviceAugment.draw returns)."""
    def rows(v, dtype=torch.float64):
        return torch.tensor([v] * n, dtype=dtype)
    return {"mosaic": rows(mosaic, torch.bool), "centre": rows(list(centre), torch.int64),
            "partners": rows(list(partners), torch.int64), "translate": rows(list(translate)),
            "shear": rows(list(shear)), "scale": rows(list(scale)), "rotate": rows(rotate), "hsv": rows(list(hsv)),
            "flips": rows(list(flips), torch.bool)}


def _device(batch, draws, **kwargs):
    aug = DetectionDeviceAugment(S, **kwargs)
    aug.draw = lambda n, seed: draws  # the parameters given, not drawn
    out, plans, hsv = aug.plan(batch, 0)
    return out, (aug.images(out["images"], plans, hsv) * 255).round()


def _boxes_params(tracked=False):  # as DetectionTransform builds them for training
    return A.BboxParams(format="pascal_voc", label_fields=["labels", "ids"] if tracked else ["labels"], clip=True,
                        min_visibility=0.25, min_width=2, min_height=2)


def _affine(translate, rotate, scale, shear=0.0):
    """A.Affine as DetectionTransform builds it, its ranges collapsed to one value each."""
    return A.Affine(scale={"x": (scale[0],) * 2, "y": (scale[1],) * 2},
                    translate_percent={"x": (translate[0],) * 2, "y": (translate[1],) * 2}, rotate=(rotate, rotate),
                    shear={"x": (-shear, -shear), "y": (-shear, -shear)}, interpolation=cv2.INTER_LINEAR,
                    border_mode=cv2.BORDER_CONSTANT, fill=PAD_VALUE, p=1.0)


def _close(ours: torch.Tensor, theirs: np.ndarray) -> None:
    """Within bilinear rounding: OpenCV quantises positions to 1/32 pixel and its weights to fixed point
    (measured: at most 1 grey level, at under 0.1% of the values)."""
    diff = np.abs(ours.permute(1, 2, 0).numpy() - theirs.astype(np.float64))
    assert diff.mean() < 0.01 and diff.max() <= 2, (diff.mean(), diff.max())


def _same_boxes(ours, theirs_boxes, theirs_labels):
    theirs_boxes = np.asarray(theirs_boxes, np.float64).reshape(-1, 4)
    assert ours["labels"].tolist() == np.asarray(theirs_labels).astype(int).tolist()
    np.testing.assert_allclose(ours["boxes"].numpy(), theirs_boxes, atol=1e-4)


# ------------------------------------------------------------------ (a) the operations
AFFINES = [((0.1, -0.05), 0.0, (1.3, 0.8), 0.0), ((-0.08, 0.1), 17.0, (0.7, 1.2), 0.0), ((0.02, 0.0), -8.0, (1.1, 1.1), 6.0)]


@pytest.mark.parametrize("translate, rotate, scale, shear", AFFINES)
def test_letterbox_and_affine_give_the_loader_pipelines_pixels_and_boxes(root, translate, rotate, scale, shear):
    ds, batch = _items(root)
    out, images = _device(batch, _draws(len(ds), translate=translate, rotate=rotate, scale=scale, shear=(shear, shear)))
    loader = A.Compose([A.LongestMaxSize(max_size=S, interpolation=cv2.INTER_LINEAR, p=1.0),
                        A.PadIfNeeded(min_height=S, min_width=S, position="center", border_mode=cv2.BORDER_CONSTANT,
                                      fill=PAD_VALUE, p=1.0), _affine(translate, rotate, scale, shear)],
                       bbox_params=_boxes_params(), strict=True)
    for i in range(len(ds)):
        image, boxes, labels = ds.load(i)
        theirs = loader(image=image, bboxes=boxes, labels=labels)
        _close(images[i], theirs["image"])
        _same_boxes({"boxes": out["boxes"][i], "labels": out["labels"][i]}, theirs["bboxes"], theirs["labels"])


def test_the_mosaic_affine_and_crop_give_the_loaders_canvas_pixels_and_boxes(root):
    """The loader's own mosaic canvas (DetectionTransform._mosaic_image, its centre and partners read back
    from its seeded generator), then Affine + CenterCrop as its mosaic tail; the device path at the same
    centre, partners and affine."""
    ds, batch = _items(root)
    transform = DetectionTransform(S, train=True, seed=0)
    translate, rotate, scale = (0.05, -0.1), 11.0, (0.6, 0.9)
    tail = A.Compose([_affine(translate, rotate, scale), A.CenterCrop(height=S, width=S)],
                     bbox_params=_boxes_params(), strict=True)
    for i in (0, 5):
        rng = np.random.default_rng(100 + i)
        centre = tuple(int(v) for v in rng.integers(S // 2, 3 * S // 2 + 1, size=2))
        partners = tuple(int(v) for v in rng.integers(0, len(ds), size=3))
        transform._rng = np.random.default_rng(100 + i)  # the same draws
        canvas, boxes, labels = transform._mosaic_image(ds, i)
        theirs = tail(image=canvas, bboxes=boxes, labels=labels)
        out, images = _device(batch, _draws(len(ds), mosaic=True, centre=centre, partners=partners,
                                            translate=translate, rotate=rotate, scale=scale))
        _close(images[i], theirs["image"])
        _same_boxes({"boxes": out["boxes"][i], "labels": out["labels"][i]}, theirs["bboxes"], theirs["labels"])


def test_hsv_gives_albumentations_pixels():
    rng = np.random.default_rng(0)
    image = cv2.resize(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8), (48, 48), interpolation=cv2.INTER_CUBIC)
    image[:8, :8] = 77  # grey pixels keep saturation 0
    for shifts in ((4.6, 31.2, -22.7), (-3.3, -17.9, 12.4), (0.0, 40.0, 30.0)):
        theirs = A.HueSaturationValue(hue_shift_limit=(shifts[0],) * 2, sat_shift_limit=(shifts[1],) * 2,
                                      val_shift_limit=(shifts[2],) * 2, p=1.0)(image=image)["image"]
        ours = shift_hsv(torch.from_numpy(image).permute(2, 0, 1)[None].double(),
                         torch.tensor([shifts], dtype=torch.float64))[0]
        diff = np.abs(ours.permute(1, 2, 0).numpy() - theirs)
        assert diff.mean() < 0.01 and diff.max() <= 1, (shifts, diff.mean(), diff.max())  # HSV2RGB's rounding


def test_flips_give_the_loaders_pixels_boxes_and_keypoints(tmp_path):
    ds, batch = _items(write_digit_keypoints(tmp_path / "kp", DigitBoxesConfig(n_train=3, n_val=1, seed=2)) /
                       "yolo" / "data.yaml", keypoints=True)
    spec = ds.keypoint_spec
    out, images = _device(batch, _draws(3, flips=(True, True)), keypoints=True, hflip=1.0, vflip=1.0,
                          flip_idx=spec.flip_idx)
    loader = DetectionTransform(S, train=True, mosaic=0.0, scale=0.0, translate=0.0, hsv=(0, 0, 0), hflip=1.0,
                                vflip=1.0, keypoints=True, seed=0)
    for i in range(3):
        image, target = loader(ds, i)
        assert torch.equal(images[i], (image * 255).round())  # no resampling: the same pixels
        _same_boxes({"boxes": out["boxes"][i], "labels": out["labels"][i]}, target["boxes"], target["labels"])
        torch.testing.assert_close(out["keypoints"][i], target["keypoints"], atol=1e-4, rtol=0)
    assert out["targets"]["keypoints"].shape[0] == sum(len(b) for b in out["boxes"])


def test_oriented_boxes_follow_the_affine_as_the_loaders(tmp_path):
    ds, batch = _items(write_digit_obb(tmp_path / "obb", DigitBoxesConfig(n_train=3, n_val=1, seed=2)) / "yolo" /
                       "data.yaml", obb=True)
    n = 3
    translate, rotate, scale = (0.04, -0.03), 25.0, (1.2, 1.2)
    out, _ = _device(batch, _draws(n, translate=translate, rotate=rotate, scale=scale), obb=True)
    loader = A.Compose([A.LongestMaxSize(max_size=S, interpolation=cv2.INTER_LINEAR, p=1.0),
                        A.PadIfNeeded(min_height=S, min_width=S, position="center", border_mode=cv2.BORDER_CONSTANT,
                                      fill=PAD_VALUE, p=1.0), _affine(translate, rotate, scale)],
                       bbox_params=_boxes_params(tracked=True), strict=True, save_applied_params=True)
    for i in range(n):
        image, boxes, labels, corners = ds.load_points(i)
        theirs = loader(image=image, bboxes=boxes, labels=labels, ids=np.arange(len(labels)))
        ids = np.asarray(theirs["ids"], np.int64)
        done = finish_points(corners[ids], np.asarray(theirs["bboxes"]), np.asarray(theirs["labels"]),
                             theirs["applied_transforms"], (S, S), keypoints=False, flip_idx=None, train=True, where="")
        torch.testing.assert_close(out["rboxes"][i], done["rboxes"], atol=1e-4, rtol=0)
        _same_boxes({"boxes": out["boxes"][i], "labels": out["labels"][i]}, done["boxes"], done["labels"])


def test_oriented_boxes_through_the_mosaic_as_the_loaders(tmp_path):
    """The loader's mosaic canvas with its corners fit to each tile (DetectionTransform._mosaic_image with
    points), Affine + CenterCrop replayed onto them: the device path's rotated boxes at the same draws."""
    ds, batch = _items(write_digit_obb(tmp_path / "obb", DigitBoxesConfig(n_train=6, n_val=1, seed=4)) / "yolo" /
                       "data.yaml", obb=True)
    transform = DetectionTransform(S, train=True, seed=0, obb=True)
    translate, rotate, scale = (-0.05, 0.08), -14.0, (0.8, 0.8)
    tail = A.Compose([_affine(translate, rotate, scale), A.CenterCrop(height=S, width=S)],
                     bbox_params=_boxes_params(tracked=True), strict=True, save_applied_params=True)
    for i in (0, 3):
        rng = np.random.default_rng(7 + i)
        centre = tuple(int(v) for v in rng.integers(S // 2, 3 * S // 2 + 1, size=2))
        partners = tuple(int(v) for v in rng.integers(0, len(ds), size=3))
        transform._rng = np.random.default_rng(7 + i)  # the same draws
        canvas, boxes, labels, corners = transform._mosaic_image(ds, i, with_points=True)
        theirs = tail(image=canvas, bboxes=boxes, labels=labels, ids=np.arange(len(labels)))
        ids = np.asarray(theirs["ids"], np.int64)
        done = finish_points(corners[ids], np.asarray(theirs["bboxes"]), np.asarray(theirs["labels"]),
                             theirs["applied_transforms"], (S, S), keypoints=False, flip_idx=None, train=True, where="")
        out, _ = _device(batch, _draws(len(ds), mosaic=True, centre=centre, partners=partners, translate=translate,
                                       rotate=rotate, scale=scale), obb=True)
        assert len(done["rboxes"]) > 0
        torch.testing.assert_close(out["rboxes"][i], done["rboxes"], atol=1e-4, rtol=0)
        _same_boxes({"boxes": out["boxes"][i], "labels": out["labels"][i]}, done["boxes"], done["labels"])


# ------------------------------------------------------------------ (b) the draws
def test_the_draws_follow_the_loader_pipelines_distributions():
    n = 3000
    aug = DetectionDeviceAugment(S, mosaic=0.7, scale=0.5, translate=0.1, degrees=10.0, shear=4.0, hflip=0.3,
                                 vflip=0.1, hsv=(5.0, 40.0, 30.0))
    d = aug.draw(n, seed=1)
    affine = A.Affine(scale=(0.5, 1.5), translate_percent=(-0.1, 0.1), rotate=(-10, 10), shear=(-4, 4), p=1.0)
    affine.set_random_seed(0)
    # albumentations' own draws, without images (its parameter methods, as Affine.get_params_dependent_on_data calls them)
    scales = [affine._get_scale(affine.scale, False, False, affine.py_random) for _ in range(n)]
    moves = [affine._get_translate_params((S, S)) for _ in range(n)]
    shears = [affine._get_shear_params() for _ in range(n)]
    rotates = [affine.py_random.uniform(*affine.rotate) for _ in range(n)]
    ours_px = torch.trunc(d["translate"] * S)  # a letterbox's canvas: whole pixels, truncated
    for ours, theirs in ((d["scale"][:, 0], [s["x"] for s in scales]), (d["scale"][:, 1], [s["y"] for s in scales]),
                         (ours_px[:, 0], [m["x"] for m in moves]), (ours_px[:, 1], [m["y"] for m in moves]),
                         (d["shear"][:, 0], [s["x"] for s in shears]), (d["rotate"], rotates)):
        assert ks_2samp(ours.numpy(), np.asarray(theirs)).pvalue > 1e-3
    hsv = A.HueSaturationValue(hue_shift_limit=5, sat_shift_limit=40, val_shift_limit=30, p=1.0)
    hsv.set_random_seed(0)
    theirs = np.array([list(hsv.get_params().values()) for _ in range(n)])
    for k in range(3):
        assert ks_2samp(d["hsv"][:, k].numpy(), theirs[:, k]).pvalue > 1e-3
    rng = np.random.default_rng(0)  # the loader's mosaic draws (DetectionTransform._mosaic_image)
    assert ks_2samp(d["centre"].flatten().numpy(), rng.integers(S // 2, 3 * S // 2 + 1, size=2 * n)).pvalue > 1e-3
    for ours, p in ((d["mosaic"], 0.7), (d["flips"][:, 0], 0.3), (d["flips"][:, 1], 0.1)):
        assert abs(ours.double().mean().item() - p) < 4 * (p * (1 - p) / n) ** 0.5
    again = aug.draw(n, seed=1)
    assert all(torch.equal(again[k], d[k]) for k in d)  # a function of the seed


def test_a_training_batch_is_augmented_in_the_hooks_a_validation_batch_is_not(root):
    dm = DetectionDataModule(data=str(root), img_size=S, batch_size=4, num_workers=0, augment="device", seed=0)
    dm.scan()
    batch = next(iter(dm.train_dataloader()))
    assert batch["images"].dtype == torch.uint8 and batch["images"].shape == (4, S, S, 3)  # as decoded

    class Trainer:  # what the hooks read of Lightning's trainer
        training, global_rank, world_size, current_epoch, num_training_batches = True, 0, 1, 0, 2
        fit_loop = type("L", (), {"epoch_loop": type("E", (), {"batch_progress": type("P", (), {
            "current": type("C", (), {"completed": 1})})})})
        precision_plugin = type("P", (), {"convert_input": staticmethod(lambda x: x)})

    dm.trainer = Trainer()
    out = dm.on_after_batch_transfer(dm.on_before_batch_transfer(batch, 0), 0)
    assert out["images"].dtype == torch.float32 and 0 <= out["images"].min() and out["images"].max() <= 1
    again = dm.on_after_batch_transfer(dm.on_before_batch_transfer(batch, 0), 0)
    assert torch.equal(out["images"], again["images"])  # seeded by the position
    val = next(iter(dm.val_dataloader()))
    assert dm.on_after_batch_transfer(dm.on_before_batch_transfer(val, 0), 0) is val
    dm.set_mosaic(False)
    assert dm.augmenter.mosaic == 0.0 and dm.state_dict()["mosaic"] == 0.0


def test_bad_settings_are_one_line_errors():
    with pytest.raises(ConfigError, match="data.augment='gpu': choose one of loader, device"):
        DetectionDataModule(augment="gpu")
    with pytest.raises(ConfigError, match="not instance masks: set data.augment: loader for segmentation"):
        SegmentationDataModule(augment="device")
    with pytest.raises(ConfigError, match="needs their flip_idx"):
        DetectionDeviceAugment(S, keypoints=True, hflip=0.5)
    with pytest.raises(ConfigError, match="takes the \\(B, S, S, 3\\) uint8 batch"):
        DetectionDeviceAugment(S).images(torch.zeros(1, S, S, 3), [], torch.zeros(1, 3))


# ------------------------------------------------------------------ (c) resume
def test_device_augmented_detection_killed_mid_epoch_resumes_to_the_uninterrupted_run(tmp_path, request, capsys):
    """8 images, batches of 4: 2 steps an epoch; the mosaic in epoch 0, closed in epoch 1; killed after
    the first step."""
    root = write_digit_boxes(tmp_path / "data", DigitBoxesConfig(n_train=8, n_val=2, seed=1))
    config = tmp_path / "tiny.yaml"
    config.write_text(tiny_detection(request.config.rootpath / "configs" / "models" / "yolov8.yaml", root, {
        **RESUMED, "data.augment": "device", "data.degrees": 5.0, "data.hflip": 0.5}))

    def args(name):
        return ["train", "det", "--config", str(config), "--runs_dir", str(tmp_path / "runs"), "--name", name]

    train_here(args("reference"), capsys)
    run = tmp_path / "runs" / "killed"
    killed = stop_at(args("killed"), tmp_path, run, 1, signal.SIGKILL)  # in the middle of the mosaic epoch
    assert killed.returncode == -signal.SIGKILL and 1 <= progress_step(run) < 4
    train_here(args("killed") + ["--resume", "true"], capsys)
    assert_same_run(tmp_path / "runs" / "reference", run, ("val_map", "val_map50", "train_loss"))
