"""Instance masks: YOLO polygons and COCO segmentation read and checked, masks through every augmentation
(letterbox, flips, affine with rotation and shear, mosaic) against the image's own pixels and
ultralytics' polygons2masks / polygons2masks_overlap, the batch contract and the ground truth's RLE."""
import json

import cv2
import numpy as np
import pytest
import torch
from pycocotools import mask as coco_mask

from tests.peers import import_ultralytics
from vision_attn.data import CocoDetection, DetectionTransform, Faults, YoloDetection, collate_detection
from vision_attn.data.masks import (
    clip_polygon,
    decode_rle,
    encode_mask,
    fill_polygons,
    instance_masks,
    mask_boxes,
    parse_coco_segmentation,
    shape_to_rle,
)
from vision_attn.errors import ConfigError, DataError

udata = import_ultralytics("ultralytics.data.utils")

H, W = 96, 128
# three instances, each painted in its own channel so the image says where each one went
TRIANGLE = np.array([[10.3, 12.6], [90.7, 20.2], [40.4, 80.9]], np.float32)  # red
PENTAGON = np.array([[70.2, 40.1], [110.6, 35.3], [120.4, 70.8], [95.3, 90.2], [72.8, 75.5]], np.float32)  # green
SQUARE = (slice(20, 50), slice(30, 62))  # blue, given as an RLE (rows 20..49, cols 30..61)


def _square_bitmap():
    m = np.zeros((H, W), np.uint8)
    m[SQUARE] = 1
    return m


def _image():
    img = np.zeros((H, W, 3), np.uint8)
    img[fill_polygons([TRIANGLE], H, W) > 0, 0] = 255
    img[fill_polygons([PENTAGON], H, W) > 0, 1] = 255
    img[_square_bitmap() > 0, 2] = 255
    return img


def _box(p):
    return [float(p[:, 0].min()), float(p[:, 1].min()), float(p[:, 0].max() - p[:, 0].min()),
            float(p[:, 1].max() - p[:, 1].min())]


def _coco_set(tmp_path, n=4, segmentation=None, extra_annotations=()):
    """``n`` copies of the three-instance image (COCO: two polygons and a compressed RLE) and one crowd RLE."""
    (tmp_path / "images").mkdir(parents=True, exist_ok=True)
    images, anns = [], []
    rle = encode_mask(_square_bitmap())
    for i in range(1, n + 1):
        cv2.imwrite(str(tmp_path / "images" / f"{i}.png"), cv2.cvtColor(_image(), cv2.COLOR_RGB2BGR))
        images.append({"id": i, "file_name": f"{i}.png", "height": H, "width": W})
        anns += [{"image_id": i, "category_id": 1, "bbox": _box(TRIANGLE), "iscrowd": 0,
                  "segmentation": [TRIANGLE.reshape(-1).tolist()]},
                 {"image_id": i, "category_id": 2, "bbox": _box(PENTAGON), "iscrowd": 0,
                  "segmentation": [PENTAGON.reshape(-1).tolist()]},
                 {"image_id": i, "category_id": 3, "bbox": [30, 20, 32, 30], "iscrowd": 0,
                  "segmentation": {"size": [H, W], "counts": rle["counts"].decode()}}]
    crowd = np.zeros((H, W), np.uint8)
    crowd[80:90, 5:25] = 1
    anns.append({"image_id": 1, "category_id": 1, "bbox": [5, 80, 20, 10], "iscrowd": 1,
                 "segmentation": segmentation if segmentation is not None else {"size": [H, W],
                                                                                 "counts": _uncompressed(crowd)}})
    anns += list(extra_annotations)
    for j, a in enumerate(anns):
        a["id"] = j + 1
    cats = [{"id": k, "name": n} for k, n in ((1, "tri"), (2, "pent"), (3, "square"))]
    (tmp_path / "ann.json").write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return tmp_path / "images", tmp_path / "ann.json"


def _uncompressed(mask):
    """COCO's uncompressed RLE counts (column-major runs, starting with zeros)."""
    flat = mask.T.reshape(-1)
    counts, value, run = [], 0, 0
    for v in flat:
        if v == value:
            run += 1
        else:
            counts.append(run)
            value, run = v, 1
    counts.append(run)
    return [int(c) for c in counts]


def _yolo_set(tmp_path, lines, n=1):
    for i in range(n):
        img = tmp_path / "images" / "train" / f"{i}.png"
        img.parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(img), cv2.cvtColor(_image(), cv2.COLOR_RGB2BGR))
        lab = tmp_path / "labels" / "train" / f"{i}.txt"
        lab.parent.mkdir(parents=True, exist_ok=True)
        lab.write_text("".join(line + "\n" for line in lines))
    (tmp_path / "data.yaml").write_text("path: .\ntrain: images/train\nval: images/train\nnames: [tri, pent, square]\n")
    return tmp_path / "data.yaml"


def _yolo_line(cls, poly):
    return f"{cls} " + " ".join(f"{v:.6f}" for v in (poly / [W, H]).reshape(-1))


# ---------------------------------------------------------------------------------------------- parsing


def test_yolo_polygons_are_read_as_shapes_with_their_enclosing_boxes(tmp_path):
    ds = YoloDetection(_yolo_set(tmp_path, [_yolo_line(0, TRIANGLE), _yolo_line(1, PENTAGON)]), masks=True)
    rec = ds.records[0]
    assert ds.masks and len(rec.shapes) == 2 and rec.labels.tolist() == [0, 1]
    np.testing.assert_allclose(rec.shapes[0][0], TRIANGLE, atol=1e-3)
    np.testing.assert_allclose(rec.boxes[1], [70.2, 35.3, 120.4, 90.2], atol=1e-3)
    assert ds.stats.polygons == 0  # not "read as boxes": kept as polygons
    plain = YoloDetection(tmp_path / "data.yaml")  # without masks: detection exactly as before
    assert plain.records[0].shapes is None and plain.stats.polygons == 2
    np.testing.assert_allclose(plain.records[0].boxes, rec.boxes, atol=1e-6)


@pytest.mark.parametrize("line, message", [
    ("0 0.1 0.2", "1 point(s); a polygon needs at least 3"),
    ("0 0.5 0.5 0.2 0.2", "a box row (class cx cy w h) where the masks need a polygon; box rows are refused"),
    ("0 0.1 0.1 0.5 0.1 0.5", "an odd number of coordinates (5)"),
    ("0 0.1 0.1 0.9 0.1 1.4 0.9", "are outside [0, 1]"),
])
def test_bad_yolo_polygons_name_file_and_line(tmp_path, line, message):
    data = _yolo_set(tmp_path, [_yolo_line(0, TRIANGLE), line])
    with pytest.raises(DataError) as e:
        YoloDetection(data, masks=True)
    text = str(e.value)
    assert "\n" not in text and message in text and "0.txt, line 2:" in text
    faults = Faults("skip")  # the faults policy: the image left out, named and counted
    ds_skip = YoloDetection(_yolo_set(tmp_path / "two", [_yolo_line(0, TRIANGLE)], n=2), masks=True)
    assert len(ds_skip) == 2
    (tmp_path / "two" / "labels" / "train" / "1.txt").write_text(_yolo_line(0, TRIANGLE) + "\n" + line + "\n")
    ds_skip = YoloDetection(tmp_path / "two" / "data.yaml", masks=True, faults=faults)
    assert len(ds_skip) == 1 and ds_skip.stats.skipped == 1
    assert [p.where for p in faults.problems] == ["line 2"] and message in faults.problems[0].reason


def test_coco_segmentation_polygons_rle_and_crowd(tmp_path):
    ds = CocoDetection(*_coco_set(tmp_path, n=2), masks=True)
    rec = ds.records[0]
    assert rec.labels.tolist() == [0, 1, 2] and isinstance(rec.shapes[0], list) and isinstance(rec.shapes[2], dict)
    np.testing.assert_array_equal(decode_rle(rec.shapes[2]), _square_bitmap())
    assert ds.stats.crowd == 1 and rec.crowd.labels.tolist() == [0] and ds.records[1].crowd.labels.tolist() == []
    np.testing.assert_array_equal(decode_rle(rec.crowd.shapes[0])[80:90, 5:25], 1)
    assert decode_rle(rec.crowd.shapes[0]).sum() == 200
    plain = CocoDetection(tmp_path / "images", tmp_path / "ann.json")  # detection unchanged: crowd skipped
    assert plain.records[0].shapes is None and plain.records[0].crowd is None and plain.stats.crowd == 1
    assert "masks" not in plain.ground_truth()[0]


@pytest.mark.parametrize("segmentation, message", [
    ([[1, 2, 3, 4]], "annotations[12]: segmentation[0] has 2 point(s); a polygon needs at least 3"),
    ([[1, 2, 3, 4, 5, 6, 7]], "annotations[12]: segmentation[0] has an odd number of coordinates (7)"),
    ({"size": [H + 1, W], "counts": [0, (H + 1) * W]},
     f"annotations[12]: segmentation.size [{H + 1}, {W}] (height, width) differs from the image's [{H}, {W}]"),
    ({"size": [H, W], "counts": [5, 7]}, f"annotations[12]: segmentation.counts add up to 12 pixels, not {H}x{W}"),
    ([], "annotations[12]: segmentation is empty"),
])
def test_bad_coco_segmentation_names_file_and_annotation(tmp_path, segmentation, message):
    images, ann = _coco_set(tmp_path, n=4, segmentation=segmentation)  # the crowd annotation is annotations[12]
    with pytest.raises(DataError) as e:
        CocoDetection(images, ann, masks=True)
    assert "\n" not in str(e.value) and message in str(e.value) and str(ann) in str(e.value)
    faults = Faults("collect")
    ds = CocoDetection(images, ann, masks=True, faults=faults)
    assert len(ds) == 3 and ds.stats.skipped == 1 and [p.where for p in faults.problems] == ["annotations[12]"]
    assert len(CocoDetection(images, ann)) == 4  # without masks the segmentation is not read


def test_missing_segmentation_is_named(tmp_path):
    images, ann = _coco_set(tmp_path, n=1, extra_annotations=[
        {"image_id": 1, "category_id": 2, "bbox": [1, 1, 5, 5], "iscrowd": 0}])
    with pytest.raises(DataError, match=r"annotations\[4\]: segmentation is missing"):
        CocoDetection(images, ann, masks=True)


def test_parse_compressed_rle_and_polygons_out_of_the_image_clipped(tmp_path):
    rle = encode_mask(_square_bitmap())
    parsed = parse_coco_segmentation({"size": [H, W], "counts": rle["counts"].decode()}, H, W)
    np.testing.assert_array_equal(decode_rle(parsed), _square_bitmap())
    wide = np.array([[-5, 10], [60, 10], [60, 200]], np.float32)  # reaches outside: clipped, noted
    images, ann = _coco_set(tmp_path, n=1, extra_annotations=[
        {"image_id": 1, "category_id": 2, "bbox": [0, 10, 60, 86], "iscrowd": 0,
         "segmentation": [wide.reshape(-1).tolist()]}])
    ds = CocoDetection(images, ann, masks=True)
    pts = ds.records[0].shapes[3][0]
    assert pts[:, 0].min() == 0 and pts[:, 1].max() == H and ds.faults.counts["polygons clipped"] == 1


# ------------------------------------------------------------------------------------- mask utilities


def test_rasterising_matches_ultralytics_polygons2masks_and_overlap():
    rng = np.random.default_rng(0)
    polys = []
    for _ in range(6):  # random star-ish polygons that overlap
        c = rng.uniform(10, 54, size=2)
        ang = np.sort(rng.uniform(0, 2 * np.pi, size=int(rng.integers(3, 12))))
        rad = rng.uniform(3, 25, size=len(ang))
        polys.append(np.stack([c[0] + rad * np.cos(ang), c[1] + rad * np.sin(ang)], 1).astype(np.float32))
    full = np.stack([fill_polygons([p], 64, 64) for p in polys])
    for ratio in (1, 4):
        ours = instance_masks(full, ratio, overlap=False)
        theirs = udata.polygons2masks((64, 64), [p.reshape(-1) for p in polys], color=1, downsample_ratio=ratio)
        np.testing.assert_array_equal(ours, theirs)
        ours = instance_masks(full, ratio, overlap=True)
        owner, index = udata.polygons2masks_overlap((64, 64), polys, downsample_ratio=ratio)
        assert ours.sum(axis=0).max() <= 1  # each pixel belongs to at most one instance
        for k, i in enumerate(index):  # ultralytics' k-th painted instance is our row index[k]
            np.testing.assert_array_equal(ours[i], owner == k + 1)


def test_overlap_gives_shared_pixels_to_the_smallest():
    big = np.zeros((1, 32, 32), np.uint8)
    big[0, 4:28, 4:28] = 1
    small = np.zeros((1, 32, 32), np.uint8)
    small[0, 10:18, 10:18] = 1
    out = instance_masks(np.concatenate([small, big]), ratio=2)
    assert out[0].sum() == 16 and out[1].sum() == 144 - 16 and (out[0] & out[1]).sum() == 0


def test_clip_polygon_is_the_exact_intersection():
    tri = np.array([[-10, 0], [20, 0], [20, 30]], np.float32)
    c = clip_polygon(tri, 0, 0, 10, 50)
    assert abs(cv2.contourArea(c) - (10 * 20 - 0.5 * 10 * 10)) < 1e-4  # the trapezoid inside x in [0, 10]
    assert len(clip_polygon(tri, 30, 30, 40, 40)) == 0


# ------------------------------------------------------------------------------------ augmentations


def _channel_masks(image, ratio):
    """The image's own pixels of each instance (its channel above half) at 1 / ``ratio``."""
    a = (image.numpy() * 255).astype(np.uint8)
    full = (a > 127).astype(np.uint8)  # (3, S, S)
    return instance_masks(full, ratio, overlap=False)


def _check_item(image, target, ratio, min_iou):
    masks, boxes, labels = target["masks"].numpy(), target["boxes"].numpy(), target["labels"].numpy()
    assert masks.dtype == np.uint8 and masks.shape == (len(boxes), image.shape[1] // ratio, image.shape[2] // ratio)
    truth = _channel_masks(image, ratio)
    for m, b, k in zip(masks, boxes, labels):
        near = cv2.dilate(truth[k], np.ones((3, 3), np.uint8))  # the class's pixels, give or take one
        assert (m & near).sum() >= 0.95 * m.sum()  # the mask lies on its instance's pixels
        mb = mask_boxes(m[None])[0] * ratio
        # mask box ~= box: within two image pixels at ratio 1 (the fill convention of ultralytics' polygon2mask,
        # coordinates truncated); within 1.5 mask pixels below (its bilinear 4x downsampling samples every
        # 4th position, so a sharp apex thinner than that fades out of the mask, as it does in ultralytics)
        assert np.abs(mb - b).max() <= (2 if ratio == 1 else 1.5 * ratio) + 1e-3, (mb, b)
    per_class = np.zeros_like(truth)
    for m, k in zip(masks, labels):
        per_class[k] |= m
    for k in set(labels.tolist()):  # and together they cover the class's pixels
        inter, uni = (per_class[k] & truth[k]).sum(), (per_class[k] | truth[k]).sum()
        assert inter / uni >= min_iou, (k, inter / uni)


def test_letterbox_masks_equal_ultralytics_for_the_letterboxed_polygons(tmp_path):
    ds = CocoDetection(*_coco_set(tmp_path, n=1), masks=True,
                       transform=DetectionTransform(64, masks=True, overlap=False))
    image, t = ds[0]
    scale, (pl, pt) = t["scale"], t["pad"]
    assert (scale, (pl, pt)) == (0.5, (0, 8))
    polys = [TRIANGLE * scale + [pl, pt], PENTAGON * scale + [pl, pt]]
    theirs = udata.polygons2masks((64, 64), [p.reshape(-1) for p in polys], color=1, downsample_ratio=4)
    np.testing.assert_array_equal(t["masks"].numpy()[:2], theirs)
    _check_item(image, t, ratio=4, min_iou=0.75)
    ds.transform = DetectionTransform(64, masks=True, overlap=False, mask_ratio=1)
    _check_item(*ds[0], ratio=1, min_iou=0.9)
    # overlap (the default): the square, the smallest, keeps the pixels it shares with the triangle
    ds.transform = DetectionTransform(64, masks=True)
    separate, shared = t["masks"].numpy(), ds[0][1]["masks"].numpy()
    assert shared.sum(axis=0).max() == 1 and (separate[0] & separate[2]).sum() > 0
    areas = separate.reshape(3, -1).sum(1)
    order = np.argsort(-areas)
    for k, i in enumerate(order):  # each keeps what no smaller one covers
        smaller = np.zeros_like(separate[0])
        for j in order[k + 1:]:
            smaller |= separate[j]
        np.testing.assert_array_equal(shared[i], separate[i] & (1 - smaller))
    plain = CocoDetection(tmp_path / "images", tmp_path / "ann.json", transform=DetectionTransform(64))[0][1]
    torch.testing.assert_close(plain["boxes"], t["boxes"])  # the same boxes as detection
    assert "masks" not in plain


@pytest.mark.parametrize("flip", ["hflip", "vflip"])
def test_flipped_masks_equal_ultralytics_for_the_flipped_polygons(tmp_path, flip):
    tf = DetectionTransform(64, train=True, mosaic=0.0, scale=0.0, translate=0.0, hsv=(0, 0, 0), seed=0,
                            masks=True, overlap=False, **{flip: 1.0})
    image, t = CocoDetection(*_coco_set(tmp_path, n=1), masks=True, transform=tf)[0]
    polys = [TRIANGLE * 0.5 + [0, 8], PENTAGON * 0.5 + [0, 8]]
    axis = 0 if flip == "hflip" else 1
    for p in polys:
        p[:, axis] = 64 - p[:, axis]
    theirs = udata.polygons2masks((64, 64), [p.reshape(-1) for p in polys], color=1, downsample_ratio=4)
    np.testing.assert_array_equal(t["masks"].numpy()[:2], theirs)
    expect = np.array([[p[:, 0].min(), p[:, 1].min(), p[:, 0].max(), p[:, 1].max()] for p in polys])
    np.testing.assert_allclose(t["boxes"].numpy()[:2], expect, atol=1e-3)  # boxes from the flipped polygons
    _check_item(image, t, ratio=4, min_iou=0.75)


def test_affine_with_rotation_and_shear_keeps_masks_on_the_pixels(tmp_path):
    ds = CocoDetection(*_coco_set(tmp_path, n=3), masks=True)
    for ratio, min_iou in ((1, 0.9), (4, 0.7)):
        ds.transform = DetectionTransform(128, train=True, mosaic=0.0, degrees=30, shear=10, scale=0.3,
                                          hflip=0.5, hsv=(0, 0, 0), seed=3, masks=True, mask_ratio=ratio,
                                          overlap=False)
        for i in range(len(ds)):
            image, t = ds[i]
            assert len(t["boxes"]) >= 2
            _check_item(image, t, ratio, min_iou)


def test_affine_boxes_are_recomputed_from_the_polygons(tmp_path):
    ds = CocoDetection(*_coco_set(tmp_path, n=1), masks=True,
                       transform=DetectionTransform(128, train=True, mosaic=0.0, degrees=45, scale=0.0,
                                                    translate=0.0, hsv=(0, 0, 0), seed=1, masks=True,
                                                    mask_ratio=1))
    image, t = ds[0]
    plain = CocoDetection(tmp_path / "images", tmp_path / "ann.json", transform=DetectionTransform(
        128, train=True, mosaic=0.0, degrees=45, scale=0.0, translate=0.0, hsv=(0, 0, 0), seed=1))[0][1]
    tri = t["boxes"][0].numpy()
    area = lambda b: (b[2] - b[0]) * (b[3] - b[1])  # noqa: E731
    assert area(tri) < 0.9 * area(plain["boxes"][0].numpy())  # tighter than the rotated box's corners
    np.testing.assert_allclose(mask_boxes(t["masks"][:1].numpy())[0], tri, atol=1.01)


def test_mosaic_masks_follow_their_tiles(tmp_path):
    ds = CocoDetection(*_coco_set(tmp_path, n=4), masks=True)
    for ratio, min_iou in ((1, 0.9), (4, 0.7)):
        ds.transform = DetectionTransform(128, train=True, mosaic=1.0, degrees=10, hsv=(0, 0, 0), seed=5,
                                          masks=True, mask_ratio=ratio, overlap=False,
                                          min_visibility=0.0)  # every visible instance kept: all pixels masked
        seen = 0
        for i in range(8):
            image, t = ds[i % 4]
            seen += len(t["boxes"])
            _check_item(image, t, ratio, min_iou)
        assert seen >= 8


def test_collate_passes_masks_and_no_transform_items_carry_them(tmp_path):
    ds = CocoDetection(*_coco_set(tmp_path, n=2), masks=True, transform=DetectionTransform(64, masks=True))
    batch = collate_detection([ds[0], ds[1]])
    assert len(batch["masks"]) == 2 and batch["masks"][0].shape == (3, 16, 16)
    ds.transform = None
    _, t = ds[0]
    assert t["masks"].shape == (3, H // 4, W // 4)
    with pytest.raises(ConfigError, match="opened without masks"):
        CocoDetection(tmp_path / "images", tmp_path / "ann.json", transform=DetectionTransform(64, masks=True))[0]
    with pytest.raises(ConfigError, match="mask_ratio=3"):
        DetectionTransform(64, masks=True, mask_ratio=3)


def test_yolo_set_through_the_same_transform(tmp_path):
    ds = YoloDetection(_yolo_set(tmp_path, [_yolo_line(0, TRIANGLE), _yolo_line(1, PENTAGON)], n=2), masks=True,
                       transform=DetectionTransform(128, train=True, mosaic=0.5, degrees=15, hsv=(0, 0, 0), seed=2,
                                                    masks=True, mask_ratio=1, overlap=False, min_visibility=0.0))
    for i in range(4):
        _check_item(*ds[i % 2], ratio=1, min_iou=0.9)


# ------------------------------------------------------------------------------------- ground truth


def test_ground_truth_rle_round_trips_with_crowd(tmp_path):
    images, ann = _coco_set(tmp_path, n=2)
    ds = CocoDetection(images, ann, masks=True)
    gt = ds.ground_truth()
    g = gt[0]
    assert g["labels"].tolist() == [0, 1, 2, 0] and g["iscrowd"].tolist() == [False, False, False, True]
    assert len(g["masks"]) == 4 and g["boxes"].shape == (4, 4) and gt[1]["iscrowd"].tolist() == [False] * 3
    assert all(m["size"] == [H, W] for m in g["masks"])
    np.testing.assert_array_equal(decode_rle(g["masks"][2]), _square_bitmap())  # the RLE as given
    crowd = np.zeros((H, W), np.uint8)
    crowd[80:90, 5:25] = 1
    np.testing.assert_array_equal(decode_rle(g["masks"][3]), crowd)
    # polygons as pycocotools rasterises the json's (what COCO.annToRLE gives its segm evaluation)
    want = decode_rle(coco_mask.merge(coco_mask.frPyObjects([TRIANGLE.reshape(-1).astype(float).tolist()], H, W)))
    np.testing.assert_array_equal(decode_rle(g["masks"][0]), want)
    assert decode_rle(shape_to_rle([TRIANGLE, PENTAGON], H, W)).sum() == coco_mask.area(coco_mask.merge(
        coco_mask.frPyObjects([TRIANGLE.reshape(-1).tolist(), PENTAGON.reshape(-1).tolist()], H, W)))


def test_rectangles_move_exactly_as_detection_boxes(tmp_path):
    # a rectangle polygon equal to its box: under letterbox, mosaic, scale, translation and flips (no rotation)
    # the box recomputed from the transformed polygon equals the box detection gives with the same seed
    images, ann = _coco_set(tmp_path, n=4)
    doc = json.loads(ann.read_text())
    for a in doc["annotations"]:
        x, y, bw, bh = a["bbox"]
        a["segmentation"] = [[x, y, x + bw, y, x + bw, y + bh, x, y + bh]]
    ann.write_text(json.dumps(doc))
    kw = dict(train=True, mosaic=0.5, scale=0.4, translate=0.2, hflip=0.5, vflip=0.5, seed=7)
    ours = CocoDetection(images, ann, masks=True, transform=DetectionTransform(64, masks=True, **kw))
    plain = CocoDetection(images, ann, transform=DetectionTransform(64, **kw))
    for i in range(12):
        (im_a, a), (im_b, b) = ours[i % 4], plain[i % 4]
        torch.testing.assert_close(im_a, im_b)  # the same random draws: the same pixels
        torch.testing.assert_close(a["boxes"], b["boxes"], atol=1e-3, rtol=0)
        torch.testing.assert_close(a["labels"], b["labels"])
