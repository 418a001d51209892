"""COCO json and YOLO txt detection data: checks on load, letterbox and mosaic boxes, the batch contract."""
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from vision_attn.data import (
    CocoDetection,
    DetectionDataset,
    DetectionRecord,
    DetectionTransform,
    YoloDetection,
    collate_detection,
    letterbox_params,
    open_detection,
    seed_worker,
)
from vision_attn.errors import ConfigError, DataError

COLOURS = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255]], np.uint8)  # class k is a solid block of COLOURS[k]


def _png(path, h, w, blocks=()):
    """A black RGB image with solid blocks ((x0, y0, x1, y1), class) in their class colours."""
    img = np.zeros((h, w, 3), np.uint8)
    for (x0, y0, x1, y1), k in blocks:
        img[y0:y1, x0:x1] = COLOURS[k]
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))


def _coco(tmp_path, annotations=None, images=None, categories=None):
    imgs = tmp_path / "images"
    _png(imgs / "a.png", 60, 80, [((10, 10, 30, 40), 0)])
    _png(imgs / "b.png", 50, 50)
    doc = {"images": images if images is not None else [
               {"id": 5, "file_name": "a.png", "width": 80, "height": 60},
               {"id": 9, "file_name": "b.png"}],  # no size: read from the file
           "annotations": annotations if annotations is not None else [
               {"id": 1, "image_id": 5, "category_id": 3, "bbox": [10, 10, 20, 30], "iscrowd": 0},
               {"id": 2, "image_id": 5, "category_id": 7, "bbox": [70, 50, 20, 20]},  # partly outside: clipped
               {"id": 3, "image_id": 5, "category_id": 7, "bbox": [5, 5, 0, 10]},  # zero width: dropped
               {"id": 4, "image_id": 5, "category_id": 3, "bbox": [90, 5, 10, 10]},  # wholly outside: dropped
               {"id": 5, "image_id": 5, "category_id": 3, "bbox": [0, 0, 60, 60], "iscrowd": 1}],  # crowd: skipped
           "categories": categories if categories is not None else [{"id": 7, "name": "dog"}, {"id": 3, "name": "cat"}]}
    ann = tmp_path / "instances.json"
    ann.write_text(json.dumps(doc))
    return imgs, ann


def test_coco_loads_clips_drops_and_keeps_negatives(tmp_path):
    ds = CocoDetection(*_coco(tmp_path))
    assert ds.names == ["cat", "dog"] and ds.category_ids == [3, 7]  # sorted by id; index -> id
    a, b = ds.records
    assert (a.image_id, a.height, a.width) == (5, 60, 80) and (b.image_id, b.height, b.width) == (9, 50, 50)
    np.testing.assert_allclose(a.boxes, [[10, 10, 30, 40], [70, 50, 80, 60]])
    assert a.labels.tolist() == [0, 1] and a.labels.dtype == np.int64 and len(b.labels) == 0
    s = ds.stats
    assert (s.images, s.negatives, s.boxes, s.clipped, s.degenerate, s.crowd) == (2, 1, 2, 1, 2, 1)
    assert s.per_class == [1, 1] and "1 clipped, 2 degenerate dropped, 1 crowd skipped" in s.summary()
    image, target = ds[0]  # no transform: the original image, boxes in its pixels
    assert image.shape == (3, 60, 80) and image.dtype == torch.float32 and float(image.max()) == 1.0
    assert target["image_id"] == 5 and target["orig_size"] == (60, 80) and target["scale"] == 1.0
    assert ds.ground_truth()[1]["boxes"].shape == (0, 4)


@pytest.mark.parametrize("text, match", [
    ('{"images": [', r"malformed JSON at line 1, column 13"),
    ('[]', "expected a JSON object"),
    ('{"images": [], "categories": [{"id": 1, "name": "a"}]}', "key 'annotations' is missing"),
    ('{"images": [{"id": 1}], "annotations": [], "categories": [{"id": 1, "name": "a"}]}',
     r"images\[0\]\.file_name is missing"),
    ('{"images": [], "annotations": [], "categories": [{"id": "1", "name": "a"}]}', r"categories\[0\]\.id should be int"),
    ('{"images": [], "annotations": [], "categories": [{"id": 0, "name": "a"}]}', r"categories\[0\]\.id is 0"),
])
def test_malformed_coco_json_names_the_key_path(tmp_path, text, match):
    (tmp_path / "images").mkdir()
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(DataError, match=match) as e:
        CocoDetection(tmp_path / "images", tmp_path / "bad.json")
    assert "bad.json" in str(e.value)


def test_coco_annotation_errors_name_the_annotation(tmp_path):
    good = {"id": 1, "image_id": 5, "category_id": 3, "bbox": [1, 1, 5, 5]}
    with pytest.raises(DataError, match=r"annotations\[1\]\.category_id 4 is not among the category ids \[3, 7\]"):
        CocoDetection(*_coco(tmp_path, annotations=[good, {**good, "category_id": 4}]))
    with pytest.raises(DataError, match=r"annotations\[0\]\.image_id 6 is not among"):
        CocoDetection(*_coco(tmp_path, annotations=[{**good, "image_id": 6}]))
    with pytest.raises(DataError, match=r"annotations\[0\]\.bbox should be 4 numbers"):
        CocoDetection(*_coco(tmp_path, annotations=[{**good, "bbox": [1, 2, 3]}]))
    with pytest.raises(DataError, match=r"annotations\[0\] should be a JSON object"):
        CocoDetection(*_coco(tmp_path, annotations=[[1, 2]]))


def test_coco_missing_image_file_is_named(tmp_path):
    images = [{"id": 1, "file_name": "a.png", "width": 80, "height": 60}, {"id": 2, "file_name": "gone.png"}]
    with pytest.raises(DataError, match=r"images\[1\]\.file_name: image .*gone\.png not found"):
        CocoDetection(*_coco(tmp_path, images=images, annotations=[]))
    ds = CocoDetection(*_coco(tmp_path, annotations=[]))
    (tmp_path / "images" / "b.png").unlink()  # removed after loading: named when read
    with pytest.raises(DataError, match=r"image .*b\.png: no such file"):
        ds[1]


def _yolo(tmp_path, labels, names="[cat, dog, bird]"):
    """A YOLO set: images/train/{a,b,c}.png (a: 80x40), labels given as {stem: text} (None: no file)."""
    for stem in ("a", "b", "c"):
        _png(tmp_path / "images" / "train" / f"{stem}.png", 40, 80)
    (tmp_path / "labels" / "train").mkdir(parents=True)
    for stem, text in labels.items():
        if text is not None:
            (tmp_path / "labels" / "train" / f"{stem}.txt").write_text(text)
    data = tmp_path / "data.yaml"
    data.write_text(f"path: .\ntrain: images/train\nval: images/train\nnames: {names}\n")
    return data


def test_yolo_loads_clips_drops_and_keeps_negatives(tmp_path):
    data = _yolo(tmp_path, {"a": "0 0.5 0.5 0.25 0.5\n\n2 0.95 0.5 0.2 0.2\n1 0.5 0.5 0 0.1\n",
                            "b": "", "c": None})
    ds = YoloDetection(data, "train")
    assert ds.names == ["cat", "dog", "bird"] and ds.category_ids == [1, 2, 3]
    assert [r.image_id for r in ds.records] == [1, 2, 3]
    np.testing.assert_allclose(ds.records[0].boxes, [[30, 10, 50, 30], [68, 16, 80, 24]], atol=1e-4)
    assert ds.records[0].labels.tolist() == [0, 2]
    s = ds.stats
    assert (s.images, s.negatives, s.boxes, s.clipped, s.degenerate, s.missing_labels) == (3, 2, 2, 1, 1, 1)


def test_yolo_polygon_rows_give_their_enclosing_box(tmp_path):
    ds = YoloDetection(_yolo(tmp_path, {"a": "1 0.1 0.2 0.5 0.2 0.3 0.7\n"}), "train")
    np.testing.assert_allclose(ds.records[0].boxes, [[8, 8, 40, 28]], atol=1e-4)


@pytest.mark.parametrize("text, match", [
    ("0 0.5 0.5 0.2\n", r"a\.txt, line 1: 4 columns; expected 5"),
    ("0 0.5 0.5 0.2 0.2\n1 0.5 0.5 0.2 0.2 0.1\n", r"a\.txt, line 2: 6 columns"),
    ("0 0.5 0.5 0.2 0.2\n\n3 0.5 0.5 0.2 0.2\n", r"a\.txt, line 3: class index 3 is not in 0\.\.2"),
    ("-1 0.5 0.5 0.2 0.2\n", r"line 1: class index -1 is not in 0\.\.2"),
    ("1.5 0.5 0.5 0.2 0.2\n", r"line 1: class index 1\.5 is not in"),
    ("0 0.5 abc 0.2 0.2\n", r"a\.txt, line 1: .* not a number"),
])
def test_bad_yolo_label_lines_name_file_and_line(tmp_path, text, match):
    with pytest.raises(DataError, match=match):
        YoloDetection(_yolo(tmp_path, {"a": text}), "train")


def test_yolo_data_yaml_errors(tmp_path):
    with pytest.raises(DataError, match="names is 3 classes|nc is 2 but names lists 3"):
        data = _yolo(tmp_path, {})
        data.write_text(data.read_text() + "nc: 2\n")
        YoloDetection(data, "train")
    (tmp_path / "list.txt").write_text("images/train/a.png\nimages/train/missing.png\n")
    data.write_text("path: .\ntrain: list.txt\nnames: {0: cat, 1: dog}\n")
    with pytest.raises(DataError, match=r"list\.txt, line 2: image .*missing\.png not found"):
        YoloDetection(data, "train")
    with pytest.raises(DataError, match="'val' is missing"):
        YoloDetection(data, "val")
    data.write_text("train: images/train\n")
    with pytest.raises(DataError, match="'names' is missing"):
        YoloDetection(data, "train")


def test_letterbox_boxes_map_back_to_the_original(tmp_path):
    data = _yolo(tmp_path, {"a": "0 0.3 0.4 0.25 0.5\n1 0.8 0.7 0.2 0.4\n"})
    ds = YoloDetection(data, "train", transform=DetectionTransform(64))
    image, t = ds[0]
    assert image.shape == (3, 64, 64) and t["orig_size"] == (40, 80)
    scale, (nh, nw), (pl, pt) = letterbox_params(40, 80, 64)
    assert (t["scale"], t["pad"]) == (scale, (pl, pt)) == (0.8, (0, 16)) and (nh, nw) == (32, 64)
    back = (t["boxes"].numpy() - [pl, pt, pl, pt]) / t["scale"]
    np.testing.assert_allclose(back, ds.records[0].boxes, atol=0.5 / scale)
    assert torch.allclose(image[:, :pt, :], torch.tensor(114 / 255))  # the grey pad band above the image


@pytest.mark.parametrize("hw", [(40, 80), (50, 37), (33, 51), (64, 64)])
def test_rectangular_letterbox_pads_to_the_stride_where_letterbox_params_says(hw):
    """``stride``: each side padded to a multiple of it (ultralytics' predict on images of one size),
    the image placed where ``letterbox_params`` puts it, so boxes map back the same way."""
    h, w = hw

    class One(DetectionDataset):
        records = [DetectionRecord(Path("x.png"), 1, h, w, np.array([[0, 0, w, h]], np.float32), np.zeros(1, np.int64))]

        def load(self, index):
            return np.full((h, w, 3), 200, np.uint8), self.records[0].boxes, self.records[0].labels

    image, t = DetectionTransform(64, stride=16)(One(), 0)
    scale, (nh, nw), (pl, pt) = letterbox_params(h, w, 64, stride=16)
    assert image.shape[1] % 16 == 0 and image.shape[2] % 16 == 0 and max(image.shape[1:]) == 64
    assert image.shape[1:] == (-(-nh // 16) * 16, -(-nw // 16) * 16) and t["pad"] == (pl, pt)
    inside = (image[0] * 255).round() == 200
    rows, cols = np.where(inside.numpy())
    assert (rows.min(), cols.min(), rows.max() + 1, cols.max() + 1) == (pt, pl, pt + nh, pl + nw)
    np.testing.assert_allclose(t["boxes"].numpy(), [[pl, pt, pl + nw, pt + nh]], atol=0.01)
    with pytest.raises(ConfigError, match="rectangular letterboxing is for evaluation"):
        DetectionTransform(64, train=True, stride=16)


def _blocks_dataset(tmp_path, n=6, hs=(40, 120), ws=(40, 120)):
    """COCO images of different shapes, each with three solid blocks whose class is their colour."""
    rng = np.random.default_rng(0)
    images, anns = [], []
    for i in range(1, n + 1):
        h, w = int(rng.integers(*hs)), int(rng.integers(*ws))
        blocks = []
        for k in range(3):  # three non-overlapping columns
            bw, bh = int(w // 3 - 4), int(rng.integers(10, h // 2))
            x0, y0 = k * (w // 3) + 2, int(rng.integers(0, h - bh))
            blocks.append(((x0, y0, x0 + bw, y0 + bh), int(rng.integers(0, 3))))
        _png(tmp_path / "images" / f"{i}.png", h, w, blocks)
        images.append({"id": i, "file_name": f"{i}.png", "width": w, "height": h})
        anns += [{"id": len(anns) + 1, "image_id": i, "category_id": k + 1, "bbox": [x0, y0, x1 - x0, y1 - y0]}
                 for (x0, y0, x1, y1), k in blocks]
    doc = {"images": images, "annotations": anns, "categories": [{"id": k + 1, "name": str(k)} for k in range(3)]}
    (tmp_path / "ann.json").write_text(json.dumps(doc))
    return tmp_path / "images", tmp_path / "ann.json"


@pytest.mark.parametrize("mosaic", [1.0, 0.0])
def test_augmented_boxes_stay_inside_and_cover_their_objects(tmp_path, mosaic):
    tf = DetectionTransform(96, train=True, mosaic=mosaic, hflip=0.5, hsv=(0, 0, 0), seed=0)
    ds = CocoDetection(*_blocks_dataset(tmp_path), transform=tf)
    n_boxes = 0
    for _ in range(4):
        for i in range(len(ds)):
            image, t = ds[i]
            boxes, labels = t["boxes"], t["labels"]
            assert image.shape == (3, 96, 96) and boxes.dtype == torch.float32 and labels.dtype == torch.int64
            assert (boxes >= 0).all() and (boxes <= 96).all() and (boxes[:, 2:] > boxes[:, :2]).all()
            for box, k in zip(boxes.tolist(), labels.tolist()):  # the box's centre shows its class colour
                cx, cy = int((box[0] + box[2]) / 2), int((box[1] + box[3]) / 2)
                assert np.allclose(image[:, cy, cx].numpy() * 255, COLOURS[k], atol=40), (box, k)
            n_boxes += len(boxes)
            if mosaic == 0:
                assert t["pad"] == letterbox_params(*t["orig_size"], 96)[2]
    assert n_boxes > 30


@pytest.mark.parametrize("hs, ws", [((40, 60), (90, 130)), ((90, 130), (40, 60))], ids=["wide", "tall"])
def test_mosaic_boxes_cover_exactly_their_objects(tmp_path, hs, ws):
    # without affine, images are cut at random centres, often on their left (wide) or top (tall) side;
    # the inside of every box (1 px in from its edges) shows its class colour and nothing else
    tf = DetectionTransform(96, train=True, mosaic=1.0, scale=0.0, translate=0.0, hsv=(0, 0, 0), seed=0)
    ds = CocoDetection(*_blocks_dataset(tmp_path, hs=hs, ws=ws), transform=tf)
    n_boxes = 0
    for _ in range(6):
        for i in range(len(ds)):
            image, t = ds[i]
            pixels = (image.permute(1, 2, 0).numpy() * 255).round()
            for (x0, y0, x1, y1), k in zip(t["boxes"].tolist(), t["labels"].tolist()):
                inner = pixels[int(np.ceil(y0)) + 1:int(y1) - 1, int(np.ceil(x0)) + 1:int(x1) - 1].reshape(-1, 3)
                if len(inner):  # boxes cut to 2 px or less have no inside
                    assert np.abs(inner - COLOURS[k]).max() <= 2, ((x0, y0, x1, y1), k)
                    n_boxes += 1
    assert n_boxes > 60


def test_seeded_transform_repeats_and_mosaic_switch_reaches_persistent_workers(tmp_path):
    images, ann = _blocks_dataset(tmp_path)
    a = CocoDetection(images, ann, transform=DetectionTransform(64, train=True, seed=1))
    b = CocoDetection(images, ann, transform=DetectionTransform(64, train=True, seed=1))
    for i in range(3):
        (xa, ta), (xb, tb) = a[i], b[i]
        assert torch.equal(xa, xb) and torch.equal(ta["boxes"], tb["boxes"])
    loader = torch.utils.data.DataLoader(a, batch_size=3, num_workers=2, persistent_workers=True,
                                         collate_fn=collate_detection, worker_init_fn=seed_worker)
    pads = [p for batch in loader for p in batch["pads"]]
    assert pads == [(0, 0)] * len(a)  # every item a mosaic
    a.transform.close_mosaic()
    assert a.transform.mosaic == 0.0
    batches = list(loader)
    assert [p for batch in batches for p in batch["pads"]] == [letterbox_params(r.height, r.width, 64)[2] for r in a.records]
    batch = batches[0]
    assert batch["images"].shape == (3, 3, 64, 64) and len(batch["boxes"]) == len(batch["labels"]) == 3
    assert batch["image_ids"] == [1, 2, 3] and batch["orig_sizes"][0] == (a.records[0].height, a.records[0].width)
    assert all(b.shape[1] == 4 for b in batch["boxes"]) and isinstance(batch["scales"][0], float)


def test_collate_refuses_images_of_different_sizes(tmp_path):
    ds = CocoDetection(*_blocks_dataset(tmp_path))
    with pytest.raises(DataError, match="different sizes.*DetectionTransform"):
        collate_detection([ds[0], ds[1]])


def test_open_detection_finds_the_layout(tmp_path):
    data = _yolo(tmp_path / "y", {"a": "0 0.5 0.5 0.2 0.2\n"})
    assert isinstance(open_detection(tmp_path / "y"), YoloDetection)
    assert isinstance(open_detection(data, "val"), YoloDetection)
    coco = tmp_path / "c"
    _png(coco / "images" / "val" / "x.png", 30, 30)
    (coco / "annotations").mkdir()
    (coco / "annotations" / "instances_val.json").write_text(json.dumps(
        {"images": [{"id": 1, "file_name": "x.png"}], "annotations": [], "categories": [{"id": 1, "name": "a"}]}))
    ds = open_detection(coco, "val")
    assert isinstance(ds, CocoDetection) and ds.stats.negatives == 1
    with pytest.raises(DataError, match="neither data.yaml"):
        open_detection(coco, "train")
    with pytest.raises(DataError, match="no such file or folder"):
        open_detection(tmp_path / "nothing")
