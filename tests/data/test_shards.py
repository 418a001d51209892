"""Issue 35 item 3: class folders packed as webdataset-format tar shards (`vision-attn data pack`), and
`train cls --data.root SHARDS`: every item's bytes and label as in the folder, the same training
(weights and metrics.json) as from the folder, an exact mid-epoch resume, each item once per epoch
across two processes, and the shard faults (cut short, not an image, an index that does not match)
named by shard and member, or skipped and counted.

The data: a few of demo:digits' PNGs per class, plus larger colour JPEGs (decoded at reduced size
from the bytes, as from the file). The trainings run in this process; the stop is a SIGTERM sent
from the dataset mid-epoch (the way a scheduler stops a run), as cheap as a run itself. Here the two
processes of DDP are the sampler's two ranks over the shard dataset in one process: the loader each
DDP process builds (ResumableDataModule.loader) is this make_loader with the trainer's world size and
rank. A real two-process DDP run from shards, killed mid-epoch and resumed, ending with the weights
of the same DDP run on the folders, is tests/tasks/test_exact_resume.py's DDP test."""
from __future__ import annotations

import json
import os
import shutil
import signal
import tarfile
from pathlib import Path

import pytest
import torch
from PIL import Image

from tests.cli_errors import one_line_error
from tests.folders import make_folder
from tests.tasks.resume_helpers import assert_same_run, max_weight_difference
from vision_attn.cli import main
from vision_attn.data import ImageFolder, load_splits, materialise, train_transforms
from vision_attn.data.file_transforms import TrainFileTransform
from vision_attn.data.loader import make_loader
from vision_attn.data.sampler import EpochItems
from vision_attn.data.shards import ShardDataset, open_shards, pack_shards
from vision_attn.errors import DataError, WriteError

TINY_VIT = "{patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2, drop_rate: 0.1, drop_path_rate: 0.1}"
CLS_METRICS = ("val_top1", "val_top5", "val_loss", "train_loss", "best_val_top1")
PER_CLASS = (6, 2, 2, 1)  # PNG train, JPEG train, PNG val, JPEG val: 80 train, 30 val images


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """train/ and val/ class folders: demo:digits' PNGs, and 48x48 colour JPEGs of the same digits."""
    digits = materialise("digits")
    root = tmp_path_factory.mktemp("digits") / "folder"
    n_png, n_jpg, v_png, v_jpg = PER_CLASS
    for c in range(10):
        for split, n_p, n_j in (("train", n_png, n_jpg), ("val", v_png, v_jpg)):
            dest = root / split / str(c)
            dest.mkdir(parents=True)
            files = sorted((digits / split / str(c)).glob("*.png"))
            for f in files[:n_p]:
                shutil.copy(f, dest / f.name)
            for k, f in enumerate(files[n_p:n_p + n_j]):
                grey = Image.open(f).resize((48, 48), Image.NEAREST)
                rgb = Image.merge("RGB", (grey, grey.point(lambda v: v // 2), grey.point(lambda v: 255 - v)))
                rgb.save(dest / f"{f.stem}_c{k}.jpg", "JPEG", quality=90)
    return root


@pytest.fixture(scope="module")
def shards(folder, tmp_path_factory) -> Path:
    return pack_shards(folder, tmp_path_factory.mktemp("packed") / "shards", shard_size=16).root


def _copy(shards: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(shards, tmp_path / "shards"))


def _train_args(runs: Path, root: Path, name: str, *extra: str) -> list[str]:
    return ["train", "cls", "--name", name, "--runs_dir", str(runs), "--data.root", str(root),
            "--data.img_size", "16", "--data.batch_size", "8", "--data.num_workers", "0",
            "--model.mixup", "0.5", "--model.ema_decay", "0.9", "--model.warmup_epochs", "1",
            "--model.model_kwargs", TINY_VIT, "--trainer.accelerator", "cpu", "--trainer.max_epochs", "1",
            "--trainer.log_every_n_steps", "1", "--trainer.enable_progress_bar", "false", "--threads", "1", *extra]


# ------------------------------------------------------------------ (a) packing and reading back
def test_every_item_reads_back_with_the_folders_bytes_label_and_augmentation(folder, shards):
    packed, scan = open_shards(shards), load_splits(folder)
    assert packed.classes == scan.classes == [str(c) for c in range(10)]
    for split in ("train", "val"):
        items, samples = getattr(packed, split), getattr(scan, split)
        assert len(items) == len(samples) == 10 * (PER_CLASS[0] + PER_CLASS[1] if split == "train" else
                                                   PER_CLASS[2] + PER_CLASS[3])
        for i, (path, label) in enumerate(samples):
            assert items.read(i) == (Path(path).read_bytes(), label), (split, i, path)
    # the same item, epoch and seed: the same augmented tensor, from the bytes as from the file (the
    # JPEGs decoded at reduced size where the crop allows)
    tf = train_transforms(16, seed=3)
    from_folder = EpochItems(ImageFolder(scan.train, scan.classes, TrainFileTransform(tf)), seed=3)
    from_shards = EpochItems(ShardDataset(packed.train, packed.classes, TrainFileTransform(train_transforms(16, seed=3))),
                             seed=3)
    jpegs = [i for i, (p, _) in enumerate(scan.train) if p.endswith(".jpg")]
    for key in [(0, 0), (5, 1), *[(i, 2) for i in jpegs[:6]]]:
        a, la = from_folder[key]
        b, lb = from_shards[key]
        assert la == lb and torch.equal(a, b), key
    assert from_shards.dataset.transform.factors.get(2, 0) + from_shards.dataset.transform.factors.get(4, 0) > 0


def test_shards_are_webdataset_tars_of_the_original_bytes_with_an_index_of_offsets(folder, shards):
    index = json.loads((shards / "index.json").read_text())
    scan = load_splits(folder)
    assert index["classes"] == scan.classes
    names = sorted(p.name for p in shards.iterdir())
    assert names == ["index.json", *[f"train-{k:06d}.tar" for k in range(5)], *[f"val-{k:06d}.tar" for k in range(2)]]
    for split in ("train", "val"):
        entry, samples = index["splits"][split], getattr(scan, split)
        assert [s["items"] for s in entry["shards"]] == [16] * (len(samples) // 16) + (
            [len(samples) % 16] if len(samples) % 16 else [])
        cols = entry["items"]
        i = 0
        for k, spec in enumerate(entry["shards"]):
            with tarfile.open(shards / spec["name"]) as tar:  # what webdataset reads: members in order
                members = tar.getmembers()
                assert len(members) == 2 * spec["items"]
                for image, cls in zip(members[::2], members[1::2]):
                    key, ext = image.name.split(".")
                    path, label = samples[i]
                    assert (key, ext) == (f"{i:08d}", Path(path).suffix[1:]) and cls.name == f"{key}.cls"
                    assert tar.extractfile(image).read() == Path(path).read_bytes()  # not re-encoded
                    assert int(tar.extractfile(cls).read()) == label == cols["label"][i]
                    assert (cols["shard"][i], cols["offset"][i], cols["cls_offset"][i]) == (k, image.offset, cls.offset)
                    i += 1
            assert (shards / spec["name"]).stat().st_size == spec["bytes"]
        assert i == len(samples)


def test_data_pack_command_sizes_replaces_and_refuses(folder, tmp_path, capsys):
    out = tmp_path / "by_bytes"
    assert main(["data", "pack", str(folder), "-o", str(out), "--max-bytes", "24K", "--split", "train"]) == 0
    printed = capsys.readouterr().out
    assert f"packed {out}: 80 train images in" in printed and f"--data.root {out}" in printed
    index = json.loads((out / "index.json").read_text())
    assert list(index["splits"]) == ["train"]
    sizes = [s["bytes"] for s in index["splits"]["train"]["shards"]]
    assert len(sizes) > 1 and max(sizes) <= 24 * 1024
    # run again with another shard size: the set is replaced as a whole
    assert main(["data", "pack", str(folder), "-o", str(out), "--shard-size", "100"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["index.json", "train-000000.tar", "val-000000.tar"]
    # a folder that is not a shard set, or one inside the data folder: refused, nothing written
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    capsys.readouterr()
    assert main(["data", "pack", str(folder), "-o", str(other)]) == 2
    one_line_error(capsys.readouterr().err, f"-o {other}", "not a shard set")
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    assert main(["data", "pack", str(folder), "-o", str(folder / "shards")]) == 2
    one_line_error(capsys.readouterr().err, "inside the folder being packed")
    assert not (folder / "shards").exists()
    assert main(["data", "pack", str(folder), "-o", str(out), "--shard-size", "2", "--max-bytes", "1M"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_failed_pack_leaves_the_previous_set_and_no_half_written_one(folder, shards, tmp_path, monkeypatch):
    out = _copy(shards, tmp_path)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    from vision_attn.data import shards as module

    real, calls = module._source_bytes, []

    def failing(path: str) -> bytes:
        calls.append(path)
        if len(calls) == 40:  # in the third shard
            raise OSError(28, "No space left on device")
        return real(path)

    monkeypatch.setattr(module, "_source_bytes", failing)
    with pytest.raises(WriteError, match=f"{out}: writing failed \\(No space left on device\\).*shards is as it was"):
        pack_shards(folder, out, shard_size=16)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shards"]  # no temporary folder left
    calls.clear()
    with pytest.raises(WriteError):
        pack_shards(folder, tmp_path / "new", shard_size=16)  # a first pack: nothing at all
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shards"]


# ------------------------------------------------------------------ (b, c) training from shards
def test_training_from_shards_equals_the_folder_and_resumes_exactly_mid_epoch(folder, shards, tmp_path, capsys,
                                                                             monkeypatch):
    runs = tmp_path / "runs"
    for root, name in ((folder, "folder"), (shards, "shards")):
        capsys.readouterr()
        assert main(_train_args(runs, root, name)) == 0, capsys.readouterr().err
    a, b = (json.loads((runs / n / "metrics.json").read_text()) for n in ("folder", "shards"))
    assert a["global_step"] == b["global_step"] == 10 and a["train_images"] == b["train_images"] == 80
    for key in (*CLS_METRICS, "val_images", "classes", "per_class_accuracy", "epochs"):
        assert a[key] == b[key], key
    assert b["data"]["source"] == str(shards) and max_weight_difference(runs / "folder", runs / "shards") == 0.0

    # stopped by SIGTERM in the middle of the epoch (while batch 6 is read), then resumed
    reads = []
    real = ShardDataset.__getitem__

    def read(self, index):
        reads.append(index)
        if len(reads) == 8 * 5 + 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, index)

    monkeypatch.setattr(ShardDataset, "__getitem__", read)
    args = _train_args(runs, shards, "stopped")
    capsys.readouterr()
    assert main(args) == 75
    assert "stopped by SIGTERM at step 5 (epoch 0)" in capsys.readouterr().err
    monkeypatch.setattr(ShardDataset, "__getitem__", real)
    assert main(args + ["--resume", "true"]) == 0
    m = json.loads((runs / "stopped" / "metrics.json").read_text())
    assert [r["step"] for r in m["resumes"]] == [5]
    assert_same_run(runs / "shards", runs / "stopped", CLS_METRICS)


# ------------------------------------------------------------------ (d) two processes
def test_two_ranks_read_every_item_once_per_epoch(shards, monkeypatch):
    """The loader of each of two DDP processes (make_loader with rank r of 2, as ResumableDataModule
    builds it from the trainer): together every item of the epoch once, and a resumed rank goes on
    with the items it had not read."""
    packed = open_shards(shards)
    dataset = ShardDataset(packed.train, packed.classes)
    seen: list[int] = []
    real = ShardDataset.__getitem__
    monkeypatch.setattr(ShardDataset, "__getitem__", lambda self, i: (seen.append(i), real(self, i))[1][1])
    for epoch in (0, 1):
        per_rank = []
        for rank in (0, 1):
            seen.clear()
            loader = make_loader(dataset, 8, train=True, num_workers=0, persistent_workers=False, pin_memory=False,
                                 drop_last=False, seed=0, num_replicas=2, rank=rank)
            loader.sampler.set_epoch(epoch)
            labels = torch.cat(list(loader))
            assert labels.tolist() == [int(packed.train.label[i]) for i in seen]
            per_rank.append(list(seen))
        assert len(per_rank[0]) == len(per_rank[1]) == 40
        assert sorted(per_rank[0] + per_rank[1]) == list(range(80))  # every item once, none twice
    loader = make_loader(dataset, 8, train=True, num_workers=0, persistent_workers=False, pin_memory=False,
                         drop_last=False, seed=0, num_replicas=2, rank=1)
    loader.sampler.resume_at(1, 16)
    seen.clear()
    list(loader)
    assert seen == per_rank[1][16:]


# ------------------------------------------------------------------ (e) faults
def test_a_cut_short_shard_is_named_by_shard_and_member_or_skipped(shards, tmp_path, capsys):
    root = _copy(shards, tmp_path)
    shard = root / "train-000001.tar"
    shard.write_bytes(shard.read_bytes()[:5000])
    index = json.loads((root / "index.json").read_text())["splits"]["train"]["items"]
    cut = [index["member"][i] for i in range(80) if index["shard"][i] == 1
           and index["cls_offset"][i] + 513 > 5000]
    with pytest.raises(DataError, match=rf"train-000001\.tar, member {cut[0]}: the shard is cut short: it ends at "
                                        rf"byte 5,000.*--data\.skip_bad_images true"):
        open_shards(root)
    capsys.readouterr()
    assert main(_train_args(tmp_path / "runs", root, "cut")) == 2
    one_line_error(capsys.readouterr().err, f"{shard}, member {cut[0]}", "cut short")
    assert main(_train_args(tmp_path / "runs", root, "skip", "--trainer.max_steps", "1",
                            "--data.skip_bad_images", "true")) == 0
    out = capsys.readouterr().out
    assert f"{len(cut)} unreadable image(s) skipped" in out
    assert f"data: skipped: {shard}, member {cut[0]}: the shard is cut short" in out
    m = json.loads((tmp_path / "runs" / "skip" / "metrics.json").read_text())
    assert [(p["path"], p["where"]) for p in m["data"]["skipped"]] == [(str(shard), f"member {c}") for c in cut]
    assert m["train_images"] == 80 - len(cut) and m["skipped_bad_images"] == len(cut)


def test_a_member_that_is_not_an_image_stops_training_from_a_worker_or_is_skipped(tmp_path, capsys):
    folder = make_folder(tmp_path / "folder", n_train=4, n_val=2)
    (folder / "train" / "dog" / "dog_002.png").write_text("not an image")
    root = pack_shards(folder, tmp_path / "shards").root  # packed as it is: the bytes are not decoded
    shard = root / "train-000000.tar"
    capsys.readouterr()
    args = _train_args(tmp_path / "runs", root, "bad", "--data.batch_size", "4", "--data.num_workers", "1")
    assert main(args) == 2  # raised in the loader's worker, reported by the training process
    one_line_error(capsys.readouterr().err, f"{shard}, member 00000006.png: not an image")
    assert main(_train_args(tmp_path / "runs", root, "skip", "--data.batch_size", "4", "--trainer.max_steps", "1",
                            "--data.skip_bad_images", "true")) == 0
    m = json.loads((tmp_path / "runs" / "skip" / "metrics.json").read_text())
    assert m["data"]["skipped"] == [{"path": str(shard), "reason": "not an image (no image format recognises its "
                                     "content)", "where": "member 00000006.png"}]
    assert m["train_images"] == 11
    # or left out when packing, and listed
    clean = pack_shards(folder, tmp_path / "clean", skip_bad_images=True)
    assert clean.items == {"train": 11, "val": 6} and [p.path for p in clean.skipped] == [
        str(folder / "train" / "dog" / "dog_002.png")]


def test_an_index_that_does_not_match_its_shards_is_named(shards, tmp_path):
    root = _copy(shards, tmp_path)
    # a shard of another pack in its place: its members are not where the index says
    shutil.copy(root / "train-000004.tar", root / "train-000002.tar")
    with pytest.raises(DataError, match=r"train-000002\.tar, member 00000032\.(png|jpg): the tar header at byte 0 is "
                                        r"'00000064\.(png|jpg)'.*the index does not match the shard; pack the folder "
                                        r"again"):
        open_shards(root)
    skipped = open_shards(root, skip_bad_images=True)
    assert len(skipped.train) == 64 and {p.where for p in skipped.faults.problems} == {
        f"member {m}" for m in json.loads((shards / "index.json").read_text())["splits"]["train"]["items"]["member"][32:48]}
    # the same sizes but another label: found when the item is read
    root = _copy(shards, tmp_path / "again")
    index = json.loads((root / "index.json").read_text())
    labels = index["splits"]["val"]["items"]["label"]
    assert labels[3] == 1  # 3 val images per class
    labels[3] = 7
    (root / "index.json").write_text(json.dumps(index))
    packed = open_shards(root)
    with pytest.raises(DataError, match=r"val-000000\.tar, member 00000003\.png: its label b'1' in 00000003\.cls is "
                                        r"not the index's 7: the index does not match"):
        packed.val.read(3)
    # a missing shard, and a JSON file that is not a shard index
    (root / "val-000001.tar").unlink()
    with pytest.raises(DataError, match=r"val-000001\.tar, member 00000016\.\w+: no such shard"):
        open_shards(root)
    (tmp_path / "other.json").write_text(json.dumps({"images": []}))
    with pytest.raises(DataError, match="not a vision-attn shard index"):
        open_shards(tmp_path / "other.json")
