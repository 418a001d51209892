"""Keypoints and oriented boxes through letterbox, mosaic, rotating affine and flips: each point lands where
the image content it marks went, flips swap points by flip_idx, points leaving the image turn invisible."""
import albumentations as A
import cv2
import numpy as np
import pytest

from vision_attn.data import DetectionTransform, collate_detection, open_detection
from vision_attn.data.det_transforms import clip_keypoints
from vision_attn.data.rotated import xywhr_to_corners
from vision_attn.data.shape_transforms import replay_points
from vision_attn.errors import ConfigError

RED, GREEN = (255, 0, 0), (0, 255, 0)
SPOTS = ((12.0, 10.0), (44.0, 30.0))  # keypoint 0 marks a red 4x4 block, keypoint 1 a green one (centres)


def _write(tmp, image, label, extra):
    (tmp / "images" / "train").mkdir(parents=True, exist_ok=True)
    (tmp / "labels" / "train").mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(tmp / "images" / "train" / "0.png"), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    (tmp / "labels" / "train" / "0.txt").write_text(label)
    (tmp / "data.yaml").write_text(f"path: .\ntrain: images/train\nval: images/train\n{extra}names: [a]\n")
    return tmp / "data.yaml"


def _pose_set(tmp, flip="[1, 0]"):
    h, w = 48, 64
    img = np.zeros((h, w, 3), np.uint8)
    for (x, y), c in zip(SPOTS, (RED, GREEN)):
        img[int(y) - 2:int(y) + 2, int(x) - 2:int(x) + 2] = c
    kp = " ".join(f"{x / w:.6f} {y / h:.6f} 2" for x, y in SPOTS)
    return open_detection(_write(tmp, img, f"0 0.45 0.45 0.7 0.7 {kp}\n", f"kpt_shape: [2, 3]\nflip_idx: {flip}\n"),
                          keypoints=True)


def _colour_at(image, x, y):
    """The mean colour (3,) of the 2x2 pixels around (x, y) (corner convention)."""
    xi, yi = int(round(x)), int(round(y))
    return image[:, yi - 1:yi + 1, xi - 1:xi + 1].reshape(3, -1).mean(1)


def _centroid(image, colour):
    r, g = image[0], image[1]
    mask = (r > 0.4) & (g < 0.3) if colour == RED else (g > 0.4) & (r < 0.3)
    ys, xs = np.nonzero(mask)
    return np.array([xs.mean() + 0.5, ys.mean() + 0.5])


def test_letterbox_moves_keypoints_by_scale_and_pad(tmp_path):
    ds = _pose_set(tmp_path)
    ds.transform = DetectionTransform(96, keypoints=True)
    image, t = ds[0]
    scale, (pl, pt) = t["scale"], t["pad"]
    np.testing.assert_allclose(t["keypoints"][0, :, :2].numpy(), np.array(SPOTS) * scale + [pl, pt], atol=1e-4)
    for k, colour in enumerate((RED, GREEN)):
        np.testing.assert_allclose(_centroid(image.numpy(), colour), t["keypoints"][0, k, :2].numpy(), atol=0.6)


@pytest.mark.parametrize("hflip, vflip", [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0)])
def test_rotating_affine_and_flip_carry_keypoints_with_the_image(tmp_path, hflip, vflip):
    ds = _pose_set(tmp_path)
    ds.transform = DetectionTransform(64, train=True, mosaic=0.0, degrees=40, scale=0.2, translate=0.05,
                                      hflip=hflip, vflip=vflip, hsv=(0, 0, 0), min_visibility=0.0, seed=1,
                                      keypoints=True)
    checked = 0
    for _ in range(6):
        image, t = ds[0]
        for inst in t["keypoints"].numpy():
            for k, (x, y, v) in enumerate(inst):
                # mirrored: point 0 is the mirror of point 1 (flip_idx [1, 0]), so it marks the green block;
                # turned upside down: no swap (flip_idx is for horizontal flips)
                colour = (RED, GREEN)[k if hflip == 0 else 1 - k]
                if v > 0:
                    np.testing.assert_allclose(_centroid(image.numpy(), colour), (x, y), atol=0.8)
                    checked += 1
                else:  # invisible only when outside the image, and then clipped to it
                    assert x in (0, 64) or y in (0, 64)
    assert checked >= 8


def test_mosaic_keypoints_mark_their_content(tmp_path):
    ds = _pose_set(tmp_path)
    ds.transform = DetectionTransform(64, train=True, mosaic=1.0, degrees=20, scale=0.3, hsv=(0, 0, 0),
                                      min_visibility=0.0, seed=3, keypoints=True)
    seen = 0
    for _ in range(8):
        image, t = ds[0]
        assert len(t["keypoints"]) == len(t["boxes"]) == len(t["labels"])
        for inst in t["keypoints"].numpy():
            for k, (x, y, v) in enumerate(inst):
                if v > 0 and 2 <= x <= 62 and 2 <= y <= 62:
                    c = _colour_at(image.numpy(), x, y)
                    assert c[k] > 0.3 and c[1 - k] < c[k]  # red marks point 0, green point 1
                    seen += 1
    assert seen >= 10


def test_flip_without_flip_idx_is_refused(tmp_path):
    h, w = 48, 64
    img = np.zeros((h, w, 3), np.uint8)
    p = _write(tmp_path, img, "0 0.5 0.5 0.5 0.5 0.4 0.4 2\n", "kpt_shape: [1, 3]\n")
    ds = open_detection(p, keypoints=True)
    ds.transform = DetectionTransform(64, train=True, mosaic=0.0, hflip=1.0, seed=0, keypoints=True)
    with pytest.raises(ConfigError, match="flip_idx"):
        ds[0]


def test_clip_keypoints_hides_points_outside():
    k = np.array([[[-1, 5, 2], [10, 70, 1], [30, 30, 2]]], np.float32)
    np.testing.assert_array_equal(clip_keypoints(k, 64, 64), [[[0, 5, 0], [10, 64, 0], [30, 30, 2]]])


def _obb_set(tmp):
    """A white 30 x 10 px rectangle turned by 25 degrees on black, labelled by its corners."""
    h, w = 64, 64
    corners = xywhr_to_corners(np.array([[30, 34, 30, 10, np.deg2rad(25)]]))[0]
    img = np.zeros((h, w, 3), np.uint8)
    cv2.fillPoly(img, [np.round((corners - 0.5) * 16).astype(np.int32)], (255, 255, 255), shift=4)
    row = "0 " + " ".join(f"{v:.6f}" for v in (corners / [w, h]).reshape(-1)) + "\n"
    return open_detection(_write(tmp, img, row, ""), obb=True)


def _inside_share(image, rbox):
    """The share of the pixels inside the oriented box that are white."""
    m = np.zeros(image.shape[1:], np.uint8)
    cv2.fillPoly(m, [np.round((xywhr_to_corners(rbox[None])[0] - 0.5) * 16).astype(np.int32)], 1, shift=4)
    return (image[0][m > 0] > 0.5).mean(), int(m.sum())


@pytest.mark.parametrize("mosaic", [0.0, 1.0])
def test_oriented_boxes_follow_the_image(tmp_path, mosaic):
    ds = _obb_set(tmp_path)
    ds.transform = DetectionTransform(64, train=True, mosaic=mosaic, degrees=60, shear=5, scale=0.2,
                                      hsv=(0, 0, 0), min_visibility=0.1, seed=2, obb=True)
    n = 0
    for _ in range(6):
        image, t = ds[0]
        r = t["rboxes"].numpy()
        assert r.shape == (len(t["labels"]), 5) and len(t["boxes"]) == len(r)
        assert (r[:, 4] >= -np.pi / 4).all() and (r[:, 4] < 3 * np.pi / 4).all() and (r[:, 2] >= r[:, 3]).all()
        white = int((image.numpy()[0] > 0.5).sum())
        for box in r:
            share, area = _inside_share(image.numpy(), box)
            # the box sits on its rectangle (its edge pixels weigh more in a small one)
            assert share > (0.8 if area > 100 else 0.6)
            if mosaic == 0:  # and covers it: nothing of it is left outside the box
                assert area > 0.85 * white
            n += 1
    assert n >= 6


def test_items_collate_to_ultralytics_targets(tmp_path):
    ds = _obb_set(tmp_path / "o")
    ds.transform = DetectionTransform(64, obb=True)
    batch = collate_detection([ds[0], ds[0]])
    t = batch["targets"]
    assert t["batch_idx"].tolist() == [0.0, 1.0] and t["cls"].shape == (2, 1) and t["bboxes"].shape == (2, 5)
    np.testing.assert_allclose(t["bboxes"][0, :4].numpy(), batch["rboxes"][0][0, :4].numpy() / 64, atol=1e-6)
    pose = _pose_set(tmp_path / "p")
    pose.transform = DetectionTransform(64, keypoints=True)
    batch = collate_detection([pose[0]])
    np.testing.assert_allclose(batch["targets"]["keypoints"][0, :, :2].numpy(),
                               batch["keypoints"][0][0, :, :2].numpy() / 64, atol=1e-6)
    assert batch["targets"]["bboxes"].shape == (1, 4)


def test_box_cut_by_the_edge_is_refit_as_ultralytics_does():
    from ultralytics.utils.instance import Instances
    from ultralytics.utils.ops import xyxyxyxy2xywhr

    from vision_attn.data.rotated import corners_to_xywhr, fit_visible

    boxes = np.array([[60, 20, 30, 8, 0.5], [5, 60, 40, 12, 2.0], [30, 30, 20, 10, 1.0]])  # two cut, one inside
    corners = xywhr_to_corners(boxes).astype(np.float32)
    inst = Instances(np.c_[corners.min(1), corners.max(1)], corners.copy(), bbox_format="xyxy", normalized=False)
    inst.clip(64, 64, preserve_obb=True)
    theirs = xyxyxyxy2xywhr(inst.segments)
    ours = corners_to_xywhr(np.stack([fit_visible(c, 0, 0, 64, 64) for c in corners]))
    np.testing.assert_allclose(ours, theirs, atol=1e-3)
    assert ours[0, 2] < 30 and ours[2, 2] == pytest.approx(20, abs=1e-3)  # the cut box is shorter


@pytest.mark.parametrize("crop, position", [((100, 50), "center"), ((90, 120), "top_left"), ((70, 40), "bottom_right")])
def test_a_padding_center_crop_moves_points_as_albumentations_moves_its_keypoints_and_the_image(crop, position):
    """A crop taller (or also wider) than the 60 x 80 image pads it first, so the shift is negative on one
    axis and positive on the other; points land where albumentations puts its own keypoints, on the pixel
    they marked."""
    img = np.zeros((60, 80, 3), np.uint8)
    marked = [(10, 12), (40, 30), (70, 55)]  # pixels (x, y); their centres are the points
    for x, y in marked:
        img[y, x] = (255, 255, 255)
    pts = np.array(marked, np.float64) + 0.5
    pipeline = A.Compose([A.CenterCrop(*crop, pad_if_needed=True, pad_position=position, p=1.0)],
                         keypoint_params=A.KeypointParams(format="xy", remove_invisible=False),
                         save_applied_params=True, strict=True)
    out = pipeline(image=img, keypoints=pts)
    assert out["applied_transforms"][0][1]["pad_params"]  # padded indeed
    moved = replay_points(pts, out["applied_transforms"], out["image"].shape[:2])
    np.testing.assert_allclose(moved, np.asarray(out["keypoints"])[:, :2], atol=1e-5)
    h, w = out["image"].shape[:2]
    inside = [(x, y) for x, y in moved if 0 <= x < w and 0 <= y < h]
    assert inside and all(out["image"][int(y), int(x)].tolist() == [255, 255, 255] for x, y in inside)


def test_a_transform_without_geometry_is_a_one_line_error_naming_it():
    out = A.Compose([A.Rotate(limit=30, p=1.0)], save_applied_params=True)(image=np.zeros((32, 32, 3), np.uint8))
    with pytest.raises(ConfigError) as e:
        replay_points(np.array([[4.0, 5.0]]), out["applied_transforms"], (32, 32))
    message = str(e.value)
    assert "\n" not in message and message.startswith("transform Rotate: instance shapes")
    assert "Affine, CenterCrop, HorizontalFlip, LongestMaxSize, PadIfNeeded, VerticalFlip" in message
