"""One reader of checkpoints: every supported file and a run folder give the same tensors; a pickle
that would call anything is refused with the name of what it would call, and nothing runs."""
import os
import pickle

import pytest
import torch
from safetensors.torch import save_file

from vision_attn.errors import CheckpointError
from vision_attn.io.state_dict import pickled_globals, read_checkpoint, read_state_dict

STATE = {"layer.weight": torch.arange(6.0).reshape(2, 3), "layer.bias": torch.zeros(2)}


@pytest.mark.parametrize("name, wrap", [
    ("plain.pth", lambda s: s),
    ("model.bin", lambda s: {f"module.{k}": v for k, v in s.items()}),
    ("timm.pth.tar", lambda s: {"state_dict": s, "epoch": 3}),
    ("lightning.ckpt", lambda s: {"state_dict": {**{f"model.{k}": v * 0 for k, v in s.items()},
                                                **{f"ema.module.{k}": v for k, v in s.items()}},
                                  "pytorch-lightning_version": "2.6", "hyper_parameters": {}}),
])
def test_every_container_gives_the_same_tensors(tmp_path, name, wrap):
    torch.save(wrap(STATE), tmp_path / name)
    got = read_state_dict(tmp_path / name)
    assert got.keys() == STATE.keys() and all(torch.equal(got[k], STATE[k]) for k in STATE)  # EMA preferred


def test_safetensors_and_run_folders(tmp_path):
    save_file(STATE, str(tmp_path / "w.safetensors"))
    assert torch.equal(read_state_dict(tmp_path / "w.safetensors")["layer.weight"], STATE["layer.weight"])
    run = tmp_path / "run"
    run.mkdir()
    torch.save({"state_dict": {"model.a": torch.ones(1)}, "hyper_parameters": {}}, run / "last.ckpt")
    assert read_checkpoint(run)["state_dict"]["model.a"].item() == 1.0  # best.ckpt, else last.ckpt
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        read_checkpoint(tmp_path / "empty_dir_or_missing")


class _Calls:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("writer", ["torch", "pickle"])
def test_a_pickle_that_would_call_a_function_is_refused_by_name(tmp_path, writer):
    marker, path = tmp_path / "ran", tmp_path / "evil.pt"
    if writer == "torch":
        torch.save({"w": torch.ones(1), "x": _Calls(marker)}, path)
    else:
        with open(path, "wb") as f:
            pickle.dump({"x": _Calls(marker)}, f, protocol=4)
    assert f"{os.system.__module__}.system" in pickled_globals(path)  # read from the opcodes, not run
    with pytest.raises(CheckpointError, match=rf"refused to load.*would call .*{os.system.__module__}\.system"):
        read_checkpoint(path)
    assert not marker.exists()


def test_an_ultralytics_pickle_goes_to_the_ultralytics_reader(tmp_path):
    path = tmp_path / "yolo.pt"
    # the opcodes of a pickle naming ultralytics' model class, without ultralytics: GLOBAL + EMPTY_TUPLE + REDUCE;
    # handed to vision_attn.io.ultralytics_pt (which reads torch's zip format only), never unpickled
    path.write_bytes(b"\x80\x02cultralytics.nn.tasks\nDetectionModel\n)R.")
    with pytest.raises(CheckpointError, match=r"yolo.pt: not a checkpoint in torch's zip format"):
        read_checkpoint(path)


def test_a_damaged_file_is_named(tmp_path):
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="junk.pt: not a readable checkpoint"):
        read_checkpoint(tmp_path / "junk.pt")
