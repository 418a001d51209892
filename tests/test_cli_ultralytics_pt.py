"""An ultralytics .pt wherever a detector checkpoint is taken: `eval det`, `predict det`, `flops`,
`export onnx`, `yaml insert --checkpoint` and `train det --model.pretrained` (files written by
ultralytics' own checkpoint code, random weights, on a tiny generated digit-boxes set)."""
import json

import pytest
import torch

from tests.io.ultralytics_files import peer_load, save_like_trainer
from vision_attn.cli import main
from vision_attn.data import DigitBoxesConfig, write_digit_boxes

DIGITS = [str(i) for i in range(10)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("ultralytics_cli")
    data = write_digit_boxes(root / "data", DigitBoxesConfig(n_train=16, n_val=8, seed=1))
    _, best = save_like_trainer("yolov8n.yaml", root / "v8", nc=10, names=DIGITS, imgsz=64)
    return root, data, best


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_eval_predict_flops_export_and_insert(files, capsys, tmp_path):
    root, data, best = files
    assert main(["eval", "det", "--checkpoint", str(best), "--data", str(data), "--json"]) == 0
    source = _json(capsys)
    assert source["images"] == 8 and set(source["per_class"]) == set(DIGITS)

    cbam_yaml, cbam_pt = tmp_path / "cbam.yaml", tmp_path / "cbam.pt"
    # the .pt as the file to edit, without --checkpoint-out: refused before anything is written
    assert main(["yaml", "insert", str(best), "--block", "CBAM", "--after", "C2f", "-o", str(cbam_yaml)]) == 2
    assert "needs --checkpoint-out NEW.pt" in capsys.readouterr().err and not cbam_yaml.exists()
    assert main(["yaml", "insert", "--checkpoint", str(best), "--block", "CBAM", "--after", "C2f", "-o", str(cbam_yaml),
                 "--checkpoint-out", str(cbam_pt)]) == 0
    out = capsys.readouterr().out
    assert "inserted 4 CBAM row(s) at 3, 6, 9, 12" in out and "355 of 355 tensors transferred" in out
    assert main(["eval", "det", "--checkpoint", str(cbam_pt), "--data", str(data), "--json"]) == 0
    inserted = _json(capsys)
    assert (inserted["map"], inserted["map50"]) == (source["map"], source["map50"])  # identity start

    images = data / "yolo" / "images" / "val"
    predicted = {}
    for ckpt in (best, cbam_pt):
        assert main(["predict", "det", "--checkpoint", str(ckpt), str(images), "--conf", "0.0", "--json"]) == 0
        predicted[ckpt] = _json(capsys)
    assert predicted[best] == predicted[cbam_pt] and predicted[best][0]["detections"]

    assert main(["flops", str(best), "--json"]) == 0
    counted = _json(capsys)
    assert counted["params"] == sum(p.numel() for p in peer_load(best).parameters())  # 3,012,798 as ultralytics

    onnx = tmp_path / "best.onnx"
    # the TorchScript exporter: what is checked is the .pt read as a checkpoint (torch.export, the default,
    # takes four times as long on a detector; tests/test_runs_everywhere.py exports a detector with it)
    assert main(["export", "onnx", "--checkpoint", str(best), "-o", str(onnx), "--exporter", "torchscript"]) == 0
    assert onnx.is_file() and "(1, 3, 64, 64)" in capsys.readouterr().out  # the file's training size


def test_train_det_from_an_ultralytics_pt_with_another_class_count(files, capsys, tmp_path, monkeypatch):
    root, data, _ = files
    _, three = save_like_trainer("yolov8n.yaml", tmp_path / "three", nc=3, seed=1)
    monkeypatch.chdir(tmp_path)
    args = ["train", "det", "--model.pretrained", str(three), "--data.data", str(data), "--data.img_size", "64",
            "--data.batch_size", "8", "--data.num_workers", "0", "--trainer.max_epochs", "1",
            "--trainer.accelerator", "cpu", "--model.plot_images", "0", "--model.min_warmup_steps", "1",
            "--name", "from_pt"]
    with pytest.warns(UserWarning, match=r"loaded 349 of 355 tensors; 6 differ in shape .*model\.22\.cv3\.0\.2\.weight"):
        assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines, paths too
    assert f"model:{three}(itsYAML)(scalen)" in "".join(out.split())
    assert "10 classes" in out
    ckpt = torch.load(tmp_path / "runs" / "from_pt" / "last.ckpt", weights_only=True)
    assert ckpt["model_yaml"]["backbone"][0] == [-1, 1, "Conv", [64, 3, 2]]  # the file's YAML, kept in the run
