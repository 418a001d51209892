"""Malicious checkpoints: refused naming the global and the file, and nothing in them runs (each
payload would create a marker file)."""
from __future__ import annotations

import builtins
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from vision_attn.errors import CheckpointError
from vision_attn.models import read_state_dict
from vision_attn.io.restricted_pickle import load_restricted
from vision_attn.io.ultralytics_pt import read_ultralytics_checkpoint


class Call:
    """Unpickling this calls ``fn(*args)`` (what a malicious pickle does through ``__reduce__``)."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def _touch(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('ran')"


def test_os_system_is_refused(tmp_path):
    marker = tmp_path / "marker"
    path = tmp_path / "system.pt"
    torch.save({"model": Call(os.system, f"touch {marker}"), "w": torch.ones(2)}, path)
    with pytest.raises(CheckpointError, match=r"system\.pt: refused to load: the pickle names the Python global "
                                              r"'posix\.system'.*nothing from the file was run"):
        read_ultralytics_checkpoint(path)
    assert not marker.exists()


def test_exec_through_reduce_is_refused(tmp_path):
    marker = tmp_path / "marker"
    path = tmp_path / "exec.pt"
    torch.save({"ema": Call(builtins.exec, _touch(marker))}, path)
    with pytest.raises(CheckpointError, match=r"exec\.pt: .*'builtins\.exec'"):
        read_ultralytics_checkpoint(path)
    assert not marker.exists()


def test_ultralytics_class_whose_state_calls_code_is_refused(tmp_path, monkeypatch):
    """A class pickled under the name ultralytics.nn.tasks.DetectionModel (a record for our reader) whose
    attributes hold a call: the call's global is refused when the state is read."""
    marker = tmp_path / "marker"
    fake = types.ModuleType("ultralytics.nn.tasks")

    class DetectionModel(nn.Module):
        pass

    DetectionModel.__module__, DetectionModel.__qualname__ = fake.__name__, "DetectionModel"
    fake.DetectionModel = DetectionModel
    monkeypatch.setitem(sys.modules, fake.__name__, fake)  # only so that pickle can name the class
    model = DetectionModel()
    model.yaml = {"backbone": [], "payload": Call(subprocess.call, ["touch", str(marker)])}
    path = tmp_path / "trojan.pt"
    torch.save({"model": model, "ema": None}, path)
    monkeypatch.delitem(sys.modules, fake.__name__)
    with pytest.raises(CheckpointError, match=r"trojan\.pt: .*'subprocess\.call'"):
        read_ultralytics_checkpoint(path)
    assert not marker.exists()


@pytest.mark.parametrize("payload,name", [
    (lambda m: Call(subprocess.Popen, ["touch", str(m)]), "subprocess.Popen"),
    (lambda m: Call(torch.load, str(m)), "torch.serialization.load"),
    (lambda m: Call(builtins.eval, _touch(m)), "builtins.eval"),
    (lambda m: Call(getattr, nn.Module, "zero_grad"), "builtins.getattr"),
])
def test_plain_state_dict_with_an_unexpected_global(tmp_path, payload, name):
    marker = tmp_path / "marker"
    path = tmp_path / "weights.pt"
    torch.save({"conv.weight": torch.ones(2, 2), "extra": payload(marker)}, path)
    with pytest.raises(CheckpointError, match=rf"weights\.pt: .*'{name}'"):
        load_restricted(path)
    with pytest.raises(CheckpointError, match=r"weights\.pt: refused to load"):
        read_state_dict(path)  # the reader of every other state dict refuses it too
    assert not marker.exists()


def test_functools_partial_is_refused(tmp_path):
    import functools

    path = tmp_path / "partial.pt"
    torch.save({"model": functools.partial(print, "hello")}, path)
    with pytest.raises(CheckpointError, match=r"'functools\.partial'"):
        load_restricted(path)


def test_storage_shorter_than_its_tensor_is_refused(tmp_path):
    path = tmp_path / "ok.pt"
    torch.save({"w": torch.arange(4.0)}, path)

    with zipfile.ZipFile(path) as z:
        records = {n: z.read(n) for n in z.namelist()}
    bad = tmp_path / "bad.pt"
    with zipfile.ZipFile(bad, "w", compression=zipfile.ZIP_STORED) as z:
        for n, data in records.items():
            if n.endswith("/data/0"):
                data = data[:8]  # storage record shorter than the 4 floats the pickle asks for
            z.writestr(n, data)
    with pytest.raises(CheckpointError, match=r"bad\.pt: refused to load: .*holds 8 bytes, the pickle asks for 16"):
        load_restricted(bad)
