"""Data sets as they come (issue 32): every bad file and label named, through `vision-attn data check`
and `vision-attn train`: a one-line error (exit 2) naming the file, or with skip_bad_images a named,
counted skip recorded in metrics.json; and the run folder itself checked and written safely."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.cli_errors import one_line_error
from tests.folders import make_folder, write_image
from vision_attn.cli import main
from vision_attn.data import DigitBoxesConfig, ImageFolder, load_splits, open_detection, write_digit_boxes
from vision_attn.errors import DataError

ROOT = Path(__file__).resolve().parents[1]
TINY_VIT = "{patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2}"
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu", "--threads", "1",
         "--data.num_workers", "0"]


def _jpeg(path: Path, size: int = 32) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(path, "JPEG", quality=90)
    return path


def _truncate(path: Path) -> Path:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    return path


def _check(capsys, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    status = main(["data", "check", *args, "--json"])
    return status, json.loads(capsys.readouterr().out)


def _train_cls(root: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["train", "cls", "--runs_dir", str(tmp_path / "runs"), "--name", "run", "--data.root", str(root),
            "--data.img_size", "16", "--data.batch_size", "8", "--model.model_kwargs", TINY_VIT,
            "--trainer.max_epochs", "1", *QUIET, *extra]


def _train_det(root: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["train", "det", "--runs_dir", str(tmp_path / "runs"), "--name", "run",
            "--model.yaml", str(ROOT / "configs" / "models" / "yolov8.yaml"), "--model.scale", "n",
            "--model.warmup_epochs", "0", "--data.data", str(root), "--data.img_size", "64", "--data.batch_size", "4",
            "--trainer.max_epochs", "1", *QUIET, *extra]


def _no_leftovers(folder: Path) -> None:
    """No temporary file of an atomic write, and no half-made run folder content."""
    if folder.exists():
        left = [p.name for p in folder.rglob(".*") if p.is_file()]
        assert not left, left


# ------------------------------------------------------------------ classification folders
def _faulty_folder(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A class folder with one fault of each kind; path -> the words its report must contain."""
    root = make_folder(tmp_path / "d", n_train=4, n_val=2)
    cat, dog, val = root / "train" / "cat", root / "train" / "dog", root / "val" / "fox"
    (dog / "text.png").write_text("this is not an image")
    _truncate(_jpeg(cat / "cut.jpg"))
    (val / "empty.png").write_bytes(b"")
    os.symlink(tmp_path / "nowhere.png", cat / "dangling.png")
    os.symlink("itself.png", dog / "itself.png")
    os.symlink(root / "train", cat / "up")  # a link to an ancestor: a loop for a walk that follows links
    return root, {str(dog / "text.png"): "not an image", str(cat / "cut.jpg"): "truncated",
                  str(val / "empty.png"): "empty image file", str(cat / "dangling.png"): "broken link",
                  str(dog / "itself.png"): "loops back on itself", str(cat / "up"): "a loop"}


def test_data_check_lists_every_fault_of_a_class_folder_in_one_run(tmp_path, capsys):
    root, expected = _faulty_folder(tmp_path)
    status, report = _check(capsys, str(root))
    assert status == 2 and not report["ok"] and report["task"] == "cls"
    found = {p["path"]: p["reason"] for p in report["problems"]}
    assert set(found) == set(expected)
    for path, words in expected.items():
        assert words in found[path], (path, found[path])
    assert report["images"] == {"train": 12, "val": 6} and report["per_class"]["val"]["fox"] == 2
    # the table view says the same in words, and exits 2
    assert main(["data", "check", str(root)]) == 2
    out = capsys.readouterr().out
    assert "6 problem(s) that stop training" in out and "cut.jpg: a truncated image" in out


def test_data_check_and_training_list_every_fault_and_an_empty_class_in_one_run(tmp_path, capsys):
    root, expected = _faulty_folder(tmp_path)
    (root / "train" / "emu").mkdir()
    expected[str(root / "train" / "emu")] = "class folder with no images"
    status, report = _check(capsys, str(root))
    found = {p["path"]: p["reason"] for p in report["problems"]}
    assert status == 2 and set(found) == set(expected), found
    for path, words in expected.items():
        assert words in found[path], (path, found[path])
    # training stops before the first step with one line naming every fault, and leaves no run folder
    assert main(_train_cls(root, tmp_path)) == 2
    line = one_line_error(capsys.readouterr().err, f"{len(expected)} problem(s) that stop training",
                          "--data.skip_bad_images true", *expected)
    assert all(words in line for words in expected.values()), line
    assert not (tmp_path / "runs" / "run").exists()


@pytest.mark.parametrize("fault", ["not an image", "broken link", "loops back on itself", "a loop",
                                   "empty image file", "truncated"])
def test_training_on_a_bad_class_folder_is_a_one_line_error_naming_the_file(fault, tmp_path, capsys):
    root, expected = _faulty_folder(tmp_path)
    bad = next(p for p, w in expected.items() if w == fault)
    for path, words in expected.items():  # keep only this fault
        if path != bad:
            Path(path).unlink()
    status = main(_train_cls(root, tmp_path))
    assert status == 2
    one_line_error(capsys.readouterr().err, bad)
    run = tmp_path / "runs" / "run"
    assert not (run / "last.ckpt").exists() or fault == "truncated"  # the scan's faults stop it before training
    _no_leftovers(run)


def test_skip_bad_images_lists_every_skipped_file_in_the_log_and_metrics(tmp_path, capsys):
    root, expected = _faulty_folder(tmp_path)
    Path(tmp_path / "d" / "train" / "cat" / "up").unlink()  # the loop is a folder, not an image: error only
    del expected[str(tmp_path / "d" / "train" / "cat" / "up")]
    assert main(_train_cls(root, tmp_path, "--data.skip_bad_images", "true")) == 0
    out = capsys.readouterr().out
    assert "5 unreadable image(s) skipped" in out
    for path in expected:
        assert f"data: skipped: {path}: " in out
    metrics = json.loads((tmp_path / "runs" / "run" / "metrics.json").read_text())
    assert {p["path"] for p in metrics["data"]["skipped"]} == set(expected)
    assert metrics["data"]["source"] == str(root) and metrics["train_images"] + metrics["val_images"] == 18


# ------------------------------------------------------------------ detection sets
def _yolo(tmp_path: Path) -> Path:
    return write_digit_boxes(tmp_path / "boxes", DigitBoxesConfig(n_train=8, n_val=4, seed=3)) / "yolo"


def _label(root: Path, split: str, k: int) -> Path:
    return sorted((root / "labels" / split).glob("*.txt"))[k]


def _image(root: Path, split: str, k: int) -> Path:
    return sorted((root / "images" / split).iterdir())[k]


def _faulty_yolo(tmp_path: Path) -> tuple[Path, dict[str, tuple[str, str | None]]]:
    root = _yolo(tmp_path)
    _label(root, "train", 0).write_text("0 34 50 20 18\n")  # pixels
    _label(root, "train", 1).write_text("0 0.5 0.5 0.2\n")  # 4 columns
    _label(root, "train", 2).write_text("0 0.5 0.5 0.2 abc\n")
    _label(root, "val", 0).write_text("12 0.5 0.5 0.2 0.2\n")  # 10 classes
    _image(root, "train", 3).write_text("not an image")
    _truncate(_image(root, "train", 4))
    expected = {str(_label(root, "train", 0)): ("look like pixels", "line 1"),
                str(_label(root, "train", 1)): ("4 columns", "line 1"),
                str(_label(root, "train", 2)): ("not a number", "line 1"),
                str(_label(root, "val", 0)): ("class index 12 is not in 0..9", "line 1"),
                str(_image(root, "train", 3)): ("not an image", None),
                str(_image(root, "train", 4)): ("truncated", None)}
    return root, expected


def test_data_check_lists_every_fault_and_change_of_a_yolo_set(tmp_path, capsys):
    root, expected = _faulty_yolo(tmp_path)
    label = _label(root, "train", 5)
    label.write_text("3 0.5 0.5 0.2 0.2\n3 0.5 0.5 0.2 0.2\n1 0.5 0.5 0.0 0.3\n2 0.1 0.1 0.3 0.1 0.2 0.3\n")
    status, report = _check(capsys, str(root / "data.yaml"))
    assert status == 2 and report["task"] == "det"
    found = {p["path"]: (p["reason"], p.get("where")) for p in report["problems"]}
    assert set(found) == set(expected)
    for path, (words, where) in expected.items():
        assert words in found[path][0] and found[path][1] == where, (path, found[path])
    notes = {(n["where"], n["reason"].split(";")[0].split(" ")[0]) for n in report["notes"] if n["path"] == str(label)}
    assert ("line 2", "duplicate") in notes and ("line 3", "box") in notes  # line 3: no area, dropped
    assert report["changed"]["duplicates removed"] == 1 and report["changed"]["degenerate dropped"] == 1
    assert report["changed"]["polygons read as boxes"] == 1
    assert "pixels" in next(p for p in report["problems"] if p["path"] == str(_label(root, "train", 0)))["reason"]


def test_training_lists_every_fault_of_a_yolo_set_in_one_run(tmp_path, capsys):
    root, expected = _faulty_yolo(tmp_path)
    assert main(_train_det(root, tmp_path)) == 2
    line = one_line_error(capsys.readouterr().err, f"{len(expected)} problem(s) that stop training", *expected)
    assert all(words in line for words, _ in expected.values()), line
    assert not (tmp_path / "runs" / "run").exists()


def test_training_names_the_label_line_with_the_hint_to_normalise(tmp_path, capsys):
    root = _yolo(tmp_path)
    label = _label(root, "train", 0)
    label.write_text("0 0.5 0.5 0.2 0.2\n0 34 50 20 18\n")
    assert main(_train_det(root, tmp_path)) == 2
    one_line_error(capsys.readouterr().err, f"{label}, line 2: coordinates 34 50 20 18 are outside [0, 1]: they "
                                             f"look like pixels; YOLO labels are normalised")
    _no_leftovers(tmp_path / "runs")


def test_a_truncated_detection_image_is_not_trained_on(tmp_path, capsys):
    root = _yolo(tmp_path)
    bad = _truncate(_image(root, "train", 2))
    assert main(_train_det(root, tmp_path)) == 2
    one_line_error(capsys.readouterr().err, str(bad), "a truncated image")
    _no_leftovers(tmp_path / "runs")
    # skipped and listed with skip_bad_images
    assert main(_train_det(root, tmp_path, "--data.skip_bad_images", "true", "--overwrite", "true")) == 0
    out = capsys.readouterr().out
    assert f"data: skipped: {bad}: a truncated image" in out and "1 bad images skipped" in out
    metrics = json.loads((tmp_path / "runs" / "run" / "metrics.json").read_text())
    assert [p["path"] for p in metrics["data"]["skipped"]] == [str(bad)] and metrics["train_images"] == 7


def test_coco_faults_name_the_file_and_key(tmp_path, capsys):
    root = write_digit_boxes(tmp_path / "boxes", DigitBoxesConfig(n_train=8, n_val=4, seed=3)) / "coco"
    ann_file = root / "annotations" / "instances_train.json"
    doc = json.loads(ann_file.read_text())
    missing = root / "images" / "train" / doc["images"][0]["file_name"]
    missing.unlink()
    doc["annotations"].append(dict(doc["annotations"][-1], id=10**6))  # a duplicate box
    ann_file.write_text(json.dumps(doc))
    status, report = _check(capsys, str(root))
    assert status == 2
    assert report["problems"] == [{"path": str(ann_file), "reason": f"image {missing} not found",
                                   "where": "images[0].file_name"}]
    dup = [n for n in report["notes"] if "duplicate" in n["reason"]]
    assert len(dup) == 1 and dup[0]["where"] == f"annotations[{len(doc['annotations']) - 1}]"


def test_data_check_of_the_shipped_demo_sets_finds_no_problem(capsys):
    for source, extra in (("demo:digits", ()), ("demo:digit-boxes", ("--format", "yolo"))):
        status, report = _check(capsys, source, *extra)
        assert status == 0 and report["ok"] and not report["problems"] and not report["notes"], source
        assert sum(report["images"].values()) in (1797, 2400) and report["sizes"]["width"]["min"] >= 8


def test_a_file_that_disappears_after_the_scan_is_named_when_it_is_read(tmp_path):
    splits = load_splits(make_folder(tmp_path / "d", n_train=2, n_val=1))
    gone = Path(splits.train[0][0])
    gone.unlink()
    with pytest.raises(DataError, match=f"{re.escape(str(gone))}: the image disappeared since the folder was scanned"):
        ImageFolder(splits.train, splits.classes)[0]
    boxes = open_detection(_yolo(tmp_path) / "data.yaml", "train")
    boxes.records[0].path.unlink()
    with pytest.raises(DataError, match=r"no such file \(gone since the data set was read\)"):
        boxes[0]


# ------------------------------------------------------------------ the runs folder
def test_a_runs_folder_under_a_file_is_refused_before_training(tmp_path, capsys):
    root = make_folder(tmp_path / "d", n_train=4, n_val=2)
    (tmp_path / "afile").write_text("x")
    args = _train_cls(root, tmp_path)
    args[args.index("--runs_dir") + 1] = str(tmp_path / "afile" / "runs")
    assert main(args) == 2
    one_line_error(capsys.readouterr().err, f"{tmp_path / 'afile'} is a file, not a folder")


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 4 MiB mounted at tmp_path/disk (needs the right to mount, as root in CI); unmounted after."""
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_read_only_or_too_small_runs_folder_is_refused_before_training(tmp_path, small_disk, capsys):
    root = make_folder(tmp_path / "d", n_train=4, n_val=2)
    big = ["--model.name", "vit_tiny_patch16_224", "--model.model_kwargs", "{patch_size: 8}"]
    args = _train_cls(root, tmp_path, *big)
    args[args.index("--runs_dir") + 1] = str(small_disk / "runs")
    assert main(args) == 2  # vit_tiny: 5.5 M parameters, about 88 MiB a checkpoint
    one_line_error(capsys.readouterr().err, f"free on the file system of {small_disk}", "a run needs room for two")
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    args = _train_cls(root, tmp_path)
    args[args.index("--runs_dir") + 1] = str(small_disk / "runs")
    assert main(args) == 2
    one_line_error(capsys.readouterr().err, f"{small_disk} cannot be written (Read-only file system)")


def test_a_disk_that_fills_during_training_is_a_one_line_error_and_keeps_the_last_checkpoint(
        tmp_path, small_disk, capsys, monkeypatch):
    import torch

    from vision_attn.tasks.checkpointer import Checkpointer

    saves = []
    original = Checkpointer.save

    def save_then_fill(self, trainer):
        original(self, trainer)
        saves.append(trainer.global_step)
        if len(saves) == 1:  # the disk fills after the first checkpoint: the next write meets ENOSPC
            with open(small_disk / "filler", "wb") as f:
                try:
                    while True:
                        f.write(b"\0" * 65536)
                except OSError:
                    pass

    monkeypatch.setattr(Checkpointer, "save", save_then_fill)
    root = make_folder(tmp_path / "d", n_train=8, n_val=2)
    args = _train_cls(root, tmp_path, "--checkpoint.every_n_steps", "1", "--trainer.max_epochs", "2")
    args[args.index("--runs_dir") + 1] = str(small_disk / "runs")
    assert main(args) == 2
    line = one_line_error(capsys.readouterr().err, "free on the file system of")
    assert "No space left on device" in line, line
    run = small_disk / "runs" / "run"
    assert torch.load(run / "last.ckpt", weights_only=True, map_location="cpu")["global_step"] == saves[0]
    _no_leftovers(run)
