"""ultralytics .pt files read without ultralytics: the same tensors and outputs as ultralytics' own
loader (test-only peer), and malicious pickles refused with nothing run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.io.ultralytics_files import peer_load, save_like_trainer
from tests.models.yolo.peer_zoo import peer_decoded
from vision_attn.errors import CheckpointError
from vision_attn.io.restricted_pickle import load_restricted
from vision_attn.io.ultralytics_pt import is_ultralytics_checkpoint, read_ultralytics_checkpoint
from vision_attn.models.yolo.from_ultralytics import detector_from_ultralytics

ROOT = Path(__file__).resolve().parents[2]
PEER_MODELS = ("yolov8n.yaml", "yolo11n.yaml", "yolo26n.yaml")  # yolo26n: the end-to-end head, reg_max 1

# the reader in a process where ultralytics cannot be imported: a meta-path finder refuses it
BLOCKED_READER = textwrap.dedent("""
    import sys
    class NoUltralytics:
        def find_spec(self, name, path=None, target=None):
            if name == "ultralytics" or name.startswith("ultralytics."):
                raise ImportError("ultralytics is blocked in this process")
    sys.meta_path.insert(0, NoUltralytics())
    import json, torch
    from vision_attn.io.ultralytics_pt import read_ultralytics_checkpoint
    from vision_attn.models.yolo.from_ultralytics import detector_from_ultralytics
    x = torch.load(sys.argv[1])
    for pt, out in json.loads(sys.argv[2]):
        ckpt = read_ultralytics_checkpoint(pt)
        model = detector_from_ultralytics(ckpt).model.eval()
        with torch.no_grad():
            y = model(x)
        torch.save({"state_dict": ckpt.state_dict, "names": ckpt.names, "train_args": ckpt.train_args,
                    "source": ckpt.source, "output": y}, out)
    try:
        import ultralytics  # noqa: F401
        sys.exit("ultralytics was importable")
    except ImportError:
        pass
    assert not any(m.startswith("ultralytics") for m in sys.modules), "ultralytics got imported"
""")


@pytest.fixture(scope="module")
def trainer_files(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("ultralytics_pt")
    return {name: save_like_trainer(name, root / name.removesuffix(".yaml")) for name in PEER_MODELS}


@pytest.fixture(scope="module")
def blocked_results(trainer_files, tmp_path_factory) -> dict[Path, dict]:
    """Every trainer file read (and its model run on one input) in one process without ultralytics."""
    root = tmp_path_factory.mktemp("blocked")
    x = torch.rand(2, 3, 64, 96, generator=torch.Generator().manual_seed(1))
    torch.save(x, root / "x.pt")
    jobs = [(str(pt), str(root / f"{pt.parent.name}-{pt.stem}.out")) for pair in trainer_files.values() for pt in pair]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", BLOCKED_READER, str(root / "x.pt"), json.dumps(jobs)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {Path(pt): {**torch.load(out), "x": x} for pt, out in jobs}


@pytest.mark.parametrize("name", PEER_MODELS)
@pytest.mark.parametrize("which", ["last", "best"])
def test_same_tensors_and_outputs_as_ultralytics(name, which, trainer_files, blocked_results):
    pt = trainer_files[name][0 if which == "last" else 1]
    ours = blocked_results[pt]
    peer = peer_load(pt)
    expected = peer.state_dict()
    assert list(ours["state_dict"]) == list(expected)
    for key, value in expected.items():
        got = ours["state_dict"][key]
        assert got.dtype == (torch.float32 if value.is_floating_point() else value.dtype), key
        torch.testing.assert_close(got, value, rtol=0, atol=0, msg=key)
    assert ours["source"] == ("ema" if which == "last" else "model")  # the trainer: model None, ema; strip: model
    assert ours["names"] == ["class0", "class1", "class2"]
    assert ours["train_args"]["imgsz"] == 64 and ours["train_args"]["data"] == "data.yaml"
    # an end-to-end head (yolo26: one-to-one branches beside the others) predicts with its one-to-one branch
    branch = "one2one" if hasattr(peer.model[-1], "one2one_cv2") else None
    torch.testing.assert_close(ours["output"], peer_decoded(peer, ours["x"], branch), rtol=1e-5, atol=1e-4)


def test_checkpoint_contents(trainer_files):
    last, best = trainer_files["yolov8n.yaml"]
    assert is_ultralytics_checkpoint(last) and is_ultralytics_checkpoint(best)
    ckpt = read_ultralytics_checkpoint(last)
    assert ckpt.model_class == "ultralytics.nn.tasks.DetectionModel"
    assert ckpt.yaml["scale"] == "n" and ckpt.yaml["nc"] == 3 and ckpt.nc == 3
    assert ckpt.info["stride"] == [8.0, 16.0, 32.0]
    assert ckpt.info["epoch"] == 0 and isinstance(ckpt.info["date"], str)
    json.dumps(ckpt.train_args)  # plain data


def test_class_count_change_keeps_all_but_the_class_outputs(trainer_files):
    _, best = trainer_files["yolov8n.yaml"]
    with pytest.warns(UserWarning, match=r"3 classes in the file, 5 in the model: kept .*cv3\.0\.2\.weight"):
        loaded = detector_from_ultralytics(best, num_classes=5)
    assert sorted(loaded.reinitialised) == sorted(f"model.22.cv3.{i}.2.{p}" for i in range(3) for p in ("weight", "bias"))
    own = loaded.model.state_dict()
    for key, value in loaded.checkpoint.state_dict.items():
        if key not in loaded.reinitialised:
            assert torch.equal(own[key], value), key


def test_plain_state_dict_is_not_an_ultralytics_checkpoint(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"conv.weight": torch.ones(2, 2)}, path)
    assert not is_ultralytics_checkpoint(path)
    assert load_restricted(path)["conv.weight"].sum() == 4
    with pytest.raises(CheckpointError, match=r"weights\.pt: holds a dict without tensors|no ultralytics model"):
        read_ultralytics_checkpoint(path)


def test_damaged_files(tmp_path):
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match=r"notes\.pt: not a checkpoint in torch's zip format"):
        read_ultralytics_checkpoint(text)
    with pytest.raises(CheckpointError, match=r"missing\.pt: no such checkpoint file"):
        read_ultralytics_checkpoint(tmp_path / "missing.pt")
