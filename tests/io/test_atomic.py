"""Atomic writes: the new file appears whole or not at all, an old one survives a failed write, no
temporary file is left, and the file gets an ordinary file's mode."""
import json
import os
import stat

import pytest
import torch
from matplotlib.figure import Figure

from vision_attn.errors import CheckpointError, ConfigError
from vision_attn.io.atomic import (atomic_folder, atomic_write, save_figure, save_torch, write_bytes, write_json, write_text,
                                   write_yaml)


def test_each_writer_round_trips_and_leaves_only_its_file(tmp_path):
    write_bytes(tmp_path / "a.bin", b"\x00\x01")
    write_text(tmp_path / "b.txt", "line\r\nkept\n")
    write_json(tmp_path / "c.json", {"x": [1, 2]})
    write_yaml(tmp_path / "d.yaml", {"b": 1, "a": [2]})
    save_torch({"w": torch.ones(2)}, tmp_path / "e.pt")
    save_torch({"w": torch.ones(2)}, tmp_path / "f.safetensors")
    fig = Figure()
    fig.add_subplot().plot([0, 1])
    save_figure(fig, tmp_path / "g.png")
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "b.txt").read_bytes() == b"line\r\nkept\n"  # line endings as given
    assert json.loads((tmp_path / "c.json").read_text()) == {"x": [1, 2]}
    assert (tmp_path / "d.yaml").read_text() == "b: 1\na:\n- 2\n"  # the mapping's own order
    assert torch.equal(torch.load(tmp_path / "e.pt", weights_only=True)["w"], torch.ones(2))
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.txt", "c.json", "d.yaml", "e.pt",
                                                          "f.safetensors", "g.png"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "keep.txt"
    target.write_text("old")

    def fail(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        atomic_write(target, fail)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_a_folder_is_replaced_whole_or_kept(tmp_path):
    target = tmp_path / "model"

    def write(version: str, fail: bool = False):
        def files(tmp) -> None:
            (tmp / "config.json").write_text(version)
            if fail:
                raise RuntimeError("killed before the weights")
            (tmp / "weights").write_text(version)
        return files

    atomic_folder(target, write("old"))
    with pytest.raises(RuntimeError):
        atomic_folder(target, write("new", fail=True))
    assert (target / "config.json").read_text() == "old" and (target / "weights").read_text() == "old"
    atomic_folder(target, write("new"))
    assert sorted(p.read_text() for p in target.iterdir()) == ["new", "new"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary or old folder left
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file; give a folder"):
        atomic_folder(tmp_path / "file", write("new"))


def test_mode_follows_the_umask_and_missing_folders_are_named(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_text(tmp_path / "m.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not mkstemp's private 0600
    with pytest.raises(ConfigError, match="does not exist"):
        write_text(tmp_path / "no" / "x.txt", "x")
    with pytest.raises(CheckpointError, match="does not exist"):
        save_torch({}, tmp_path / "no" / "x.pt")
    assert write_json(tmp_path / "made" / "x.json", {}, mkdir=True).is_file()
