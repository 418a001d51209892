"""Image folders: layouts, checks of bad input, decoding, the seeded split, the demo data."""
from pathlib import Path

import numpy as np
import pytest

from tests.folders import make_folder, write_image
from vision_attn.data import ImageFolder, load_image, load_splits, materialise, scan_folder, split_samples
from vision_attn.errors import ConfigError, DataError


def test_train_val_layout_and_ignored_files(tmp_path):
    root = make_folder(tmp_path / "d")
    (root / "train" / "cat" / "notes.txt").write_text("not an image")
    (root / "train" / "dog" / ".DS_Store").write_bytes(b"\0\1")
    (root / "val" / "fox" / "labels.csv").write_text("a,b")
    s = load_splits(root)
    assert s.classes == ["cat", "dog", "fox"] and s.layout == "train/val"
    assert len(s.train) == 24 and len(s.val) == 9 and s.ignored == 3
    assert "3 non-image file(s) ignored" in s.summary()
    assert {label for _, label in s.val} == {0, 1, 2}


def test_nested_images_and_upper_case_extensions(tmp_path):
    root = make_folder(tmp_path / "d", n_train=2, n_val=1)
    write_image(root / "train" / "cat" / "sub" / "deep" / "X.PNG", 0)
    assert len(scan_folder(root / "train").samples) == 7


def test_empty_class_folder_is_an_error(tmp_path):
    root = make_folder(tmp_path / "d", n_train=2, n_val=1)
    (root / "train" / "owl").mkdir()
    (root / "train" / "owl" / "readme.txt").write_text("x")
    with pytest.raises(DataError, match=r"owl: a train class folder with no images \(1 other file\(s\) ignored"):
        load_splits(root)


def test_val_class_missing_from_train_is_an_error(tmp_path):
    root = make_folder(tmp_path / "d", n_train=2, n_val=1)
    write_image(root / "val" / "owl" / "a.png", 0)
    with pytest.raises(DataError, match=r"class folder\(s\) 'owl' are not among train's 3 classes \(cat, dog, fox\)"):
        load_splits(root)


def test_no_class_folders_and_missing_root(tmp_path):
    (tmp_path / "flat").mkdir()
    write_image(tmp_path / "flat" / "a.png", 0)
    with pytest.raises(DataError, match="has no class subfolders"):
        load_splits(tmp_path / "flat")
    with pytest.raises(DataError, match="no such folder"):
        load_splits(tmp_path / "nowhere")
    (tmp_path / "only_val" / "val" / "a").mkdir(parents=True)
    with pytest.raises(DataError, match="has val/ but no train/"):
        load_splits(tmp_path / "only_val")


def _corrupt(root: Path) -> tuple[Path, Path, Path]:
    bad = root / "train" / "dog" / "broken.png"
    bad.write_bytes(b"this is not a png")
    good = write_image(root / "train" / "cat" / "big.jpg", 0, size=64, fmt="JPEG")
    truncated = root / "train" / "cat" / "truncated.jpg"
    truncated.write_bytes(good.read_bytes()[:300])
    empty = root / "val" / "fox" / "empty.png"
    empty.write_bytes(b"")
    return bad, truncated, empty


def test_corrupt_and_truncated_images_name_the_file(tmp_path):
    root = make_folder(tmp_path / "d", n_train=2, n_val=1)
    bad, truncated, _ = _corrupt(root)
    with pytest.raises(DataError, match=r"broken\.png: not an image \(no image format recognises its content\).*skip_bad_images"):
        load_image(bad)
    with pytest.raises(DataError, match=r"truncated\.jpg: a truncated image \(.*\): the file was cut short"):
        load_image(truncated)


def test_empty_file_is_an_error_unless_skipping(tmp_path):
    root = make_folder(tmp_path / "d", n_train=2, n_val=1)
    _corrupt(root)
    with pytest.raises(DataError, match=r"empty\.png: empty image file \(0 bytes\)"):
        load_splits(root)


def test_skip_bad_images_reports_the_count(tmp_path):
    root = make_folder(tmp_path / "d", n_train=2, n_val=1)
    bad, truncated, empty = _corrupt(root)
    s = load_splits(root, skip_bad_images=True)
    assert sorted(s.bad) == sorted(map(str, (bad, truncated, empty)))
    assert len(s.train) == 7 and len(s.val) == 3  # big.jpg decodes; the 3 bad files are left out
    assert "3 unreadable image(s) skipped" in s.summary()


def test_dataset_decodes_to_rgb(tmp_path):
    path = tmp_path / "c" / "a" / "g.png"
    path.parent.mkdir(parents=True)
    from PIL import Image

    Image.fromarray(np.full((5, 7), 200, np.uint8), mode="L").save(path)
    image, label = ImageFolder([(str(path), 0)], ["a"])[0]
    assert image.shape == (5, 7, 3) and image.dtype == np.uint8 and label == 0


def test_seeded_split_is_stratified_and_stable(tmp_path):
    root = make_folder(tmp_path / "d", n_train=10, n_val=0, split=False)
    a = load_splits(root, val_fraction=0.3, split_seed=1)
    b = load_splits(root, val_fraction=0.3, split_seed=1)
    c = load_splits(root, val_fraction=0.3, split_seed=2)
    assert a.train == b.train and a.val == b.val and a.val != c.val
    assert a.layout.startswith("split root") and len(a.val) == 9 and len(a.train) == 21
    assert not set(a.train) & set(a.val)
    one = split_samples([("x", 0), ("y", 1), ("z", 1)], 0.5)
    assert ("x", 0) in one[0]  # a class of one image stays in train
    with pytest.raises(DataError, match="val_fraction"):
        split_samples([("x", 0)], 1.5)


def test_demo_digits_materialised_once(tmp_path):
    root = materialise("digits", cache=tmp_path)
    s = load_splits(root)
    assert s.classes == [str(i) for i in range(10)]
    assert len(s.train) + len(s.val) == 1797 and 350 <= len(s.val) <= 370
    mtime = (root / "train").stat().st_mtime_ns
    assert materialise("digits", cache=tmp_path) == root and (root / "train").stat().st_mtime_ns == mtime
    img = load_image(s.train[0][0])
    assert img.shape == (8, 8, 3)
    with pytest.raises(ConfigError, match="did you mean demo:digits"):
        materialise("digit", cache=tmp_path)


def test_demo_faces_when_scikit_image_is_there(tmp_path):
    pytest.importorskip("skimage")
    s = load_splits(materialise("faces", cache=tmp_path))
    assert s.classes == ["face", "non_face"] and len(s.train) + len(s.val) == 200
