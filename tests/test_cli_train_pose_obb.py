"""`vision-attn train|eval|predict pose / obb` and `export onnx --verify` of their runs on tiny generated sets
(the digit-keypoints and digit-obb sets, 8 train / 4 val images at 64 px, one epoch): the run folder with
keypoint / rotated-box mAP, exact resume, evaluation and prediction from the run folder (keypoints and
rotated boxes in original pixels, drawn images), the export checked in onnxruntime and run there by eval;
a keypoint row of the wrong length is a one-line error (exit 2) with nothing written."""
import json

import pytest
import torch

from tests._configs import tiny_detection
from tests.analysis.written_runs import pose_metrics
from vision_attn.analysis.compare import run_metric
from vision_attn.cli import main
from vision_attn.data import DigitBoxesConfig
from vision_attn.data.digit_warps import write_digit_keypoints, write_digit_obb

SETS = {"pose": (write_digit_keypoints, "yolov8-pose.yaml"), "obb": (write_digit_obb, "yolov8-obb.yaml")}


@pytest.fixture
def tiny(tmp_path, monkeypatch, request):
    """A generated set of the task (8 train / 4 val images) and a config for it, cwd = tmp_path."""
    task = request.param
    write, yaml = SETS[task]
    monkeypatch.chdir(tmp_path)
    root = write(tmp_path / "data", DigitBoxesConfig(n_train=8, n_val=4, seed=1))
    config = tmp_path / "tiny.yaml"
    config.write_text(tiny_detection(request.config.rootpath / "configs" / "models" / yaml, root, {
        "model.plot_images": 2, "data.format": "yolo", "trainer.max_epochs": 1}))
    return task, config, root


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("tiny", ["pose", "obb"], indirect=True)
def test_train_resume_eval_predict_and_export(tiny, capsys, tmp_path):
    task, config, root = tiny
    assert main(["train", task, "--config", str(config)]) == 0
    out = capsys.readouterr().out
    run = tmp_path / "runs" / "tiny"
    assert ("keypoint mAP@.5:" if task == "pose" else "rotated-box mAP@.5:") in out
    for name in ("best.ckpt", "last.ckpt", "model.safetensors", "metrics.json", "loss.png", "map.png",
                 "predictions.png"):
        assert (run / name).is_file(), name
    m = json.loads((run / "metrics.json").read_text())
    assert m["epochs"] == 1 and 0 <= m["val_map"] <= m["val_map50"] <= 1 and m["task"] == task
    # compare ranks the run by its task's own metric; tests/analysis/written_runs.py writes these keys too
    assert run_metric(m, run) == ((m["val_pose_map"], "keypoint mAP@.5:.95") if task == "pose"
                                  else (m["val_map"], "rotated-box mAP@.5:.95"))
    legacy = {k: v for k, v in m.items() if k != "task"}  # a run from before metrics.json named its task
    assert run_metric(legacy, run) == run_metric(m, run)  # its checkpoint's record
    if task == "pose":
        assert set(pose_metrics("x", 0.5, 0.5)) <= set(m)
    ckpt = torch.load(run / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["task"] == task
    csv = (run / "csv" / "metrics.csv").read_text().splitlines()[0]
    if task == "pose":
        assert 0 <= m["val_pose_map"] <= m["val_pose_map50"] <= 1 and m["keypoints"]["kpt_shape"] == [4, 3]
        assert ckpt["model_yaml"]["kpt_shape"] == [4, 3] and "train/pose" in csv and "val/pose_mAP50-95" in csv
    else:
        assert "train/angle" in csv and ckpt["model_yaml"]["head"][-1][2] == "OBB"

    assert main(["train", task, "--config", str(config), "--resume", "--trainer.max_epochs", "2"]) == 0
    m2 = json.loads((run / "metrics.json").read_text())
    assert m2["epochs"] == 2 and m2["global_step"] == 2 * m["global_step"] and m2["resumed_from"].endswith("last.ckpt")
    capsys.readouterr()

    assert main(["eval", task, "--checkpoint", str(run), "--data", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == 4 and 0 <= report["map"] <= report["map50"] <= 1
    if task == "pose":
        assert 0 <= report["pose_map"] <= report["pose_map50"] <= 1 and set(report["per_class_pose"]) == set(report["per_class"])

    images = root / "yolo" / "images" / "val"
    assert main(["predict", task, str(images), "--checkpoint", str(run), "-o", "pred", "--conf", "0.0"]) == 0
    file = "keypoints.json" if task == "pose" else "rotated.json"
    assert f"{file} written to pred" in capsys.readouterr().out
    found = json.loads((tmp_path / "pred" / file).read_text())
    assert len(found) == 4 and all((tmp_path / "pred" / f"{p.stem}.png").is_file() for p in sorted(images.iterdir()))
    first = found[0]["detections"][0]
    if task == "pose":  # four corners per detection, in the original image
        assert len(first["keypoints"]) == 4 and all(len(p) == 3 for p in first["keypoints"])
        assert all(0 <= p[0] <= found[0]["width"] and 0 <= p[1] <= found[0]["height"] for p in first["keypoints"])
    else:  # cx, cy, w, h, r with r in [0, pi/2) and its four corners
        assert len(first["rbox"]) == 5 and 0 <= first["rbox"][4] < 1.5708 and len(first["corners"]) == 4
    capsys.readouterr()

    assert main(["export", "onnx", "--checkpoint", str(run), "-o", "m.onnx", "--exporter", "torchscript",
                 "--verify"]) == 0
    out = capsys.readouterr().out
    assert ("output 'boxes_scores_keypoints'" if task == "pose" else "output 'rboxes_scores'") in out
    assert "parity: ok" in out and ("keypoints" if task == "pose" else "angle") in out
    assert main(["export", "onnx", "--checkpoint", str(run), "-o", "n.onnx", "--nms"]) == 2
    assert "--nms applies to detectors and segmenters" in _error(capsys)
    assert main(["eval", task, "--checkpoint", str(run), "--data", str(root), "--json", "--runtime",
                 "onnxruntime"]) == 0
    ort = json.loads(capsys.readouterr().out)
    for key in ("map", "map50", "pose_map", "pose_map50") if task == "pose" else ("map", "map50"):
        assert abs(ort[key] - report[key]) < 1e-3, key


@pytest.mark.parametrize("tiny", ["pose"], indirect=True)
def test_a_keypoint_row_of_the_wrong_length_is_one_line_and_writes_nothing(tiny, capsys, tmp_path):
    task, config, root = tiny
    label = sorted((root / "yolo" / "labels" / "train").iterdir())[2]
    lines = label.read_text().splitlines()
    label.write_text("\n".join([lines[0] + " 0.5"] + lines[1:]) + "\n")
    assert main(["train", task, "--config", str(config)]) == 2
    err = _error(capsys)
    assert f"{label.name}, line 1: 18 columns" in err or (label.name in err and "line 1" in err)
    assert not (tmp_path / "runs").exists()
