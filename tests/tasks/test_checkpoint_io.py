"""Checkpoints are written beside their target and renamed: a failure never leaves half a file."""
import pytest
import torch

from vision_attn.tasks.checkpoint_io import AtomicCheckpointIO


def test_atomic_save_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "run" / "last.ckpt"
    io.save_checkpoint({"epoch": 1, "w": torch.ones(2)}, path)
    assert torch.load(path, weights_only=True)["epoch"] == 1

    def broken(obj, f, *args, **kwargs):
        with open(f, "wb") as fh:
            fh.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        io.save_checkpoint({"epoch": 2}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True)["epoch"] == 1
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]
