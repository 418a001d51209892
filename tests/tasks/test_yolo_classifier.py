"""`train cls --model.yaml yolov8-cls.yaml`: a YOLO classifier trained on a generated image folder, its
YAML recorded in the run, evaluated, predicted and exported from the run folder alone; with a CBAM row
inserted too; and the wrong combinations refused in one line (exit 2)."""
import json
from pathlib import Path

import pytest
import torch
import yaml

from tests.folders import make_folder
from vision_attn.cli import main
from vision_attn.tasks.classify.run import load_classifier

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "models"
TINY = """\
name: {name}
model:
  yaml: {yaml}
  scale: n
  warmup_epochs: 0.5
  ema_decay: 0.9
data:
  root: {root}
  img_size: 32
  batch_size: 4
  num_workers: 0
  hflip: 0.0
trainer:
  accelerator: cpu
  max_epochs: 1
"""


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """3 classes, 4 train / 2 val images of 32 px each; cwd = tmp_path."""
    monkeypatch.chdir(tmp_path)
    return make_folder(tmp_path / "data", n_train=4, n_val=2, size=32)


def _config(tmp_path, root, name: str, model_yaml: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(TINY.format(name=name, yaml=model_yaml, root=root))
    return str(path)


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def _train_eval_predict(tmp_path, root, capsys, name: str, model_yaml: str) -> dict:
    assert main(["train", "cls", "--config", _config(tmp_path, root, name, model_yaml)]) == 0
    out = capsys.readouterr().out
    assert "not normalised" in out and f"run folder: runs/{name}" in out
    run = tmp_path / "runs" / name
    m = json.loads((run / "metrics.json").read_text())
    assert m["epochs"] == 1 and m["train_images"] == 12 and m["val_images"] == 6 and m["gmacs"] > 0
    ckpt = torch.load(run / "best.ckpt", map_location="cpu", weights_only=True)
    hp, data_hp = ckpt["hyper_parameters"], ckpt["datamodule_hyper_parameters"]
    assert ckpt["task"] == "cls" and hp["yaml_scale"] == "n" and "Classify" in hp["yaml"]
    assert tuple(data_hp["mean"]) == (0.0, 0.0, 0.0) and tuple(data_hp["std"]) == (1.0, 1.0, 1.0)
    assert m["params"] == sum(v.numel() for k, v in ckpt["state_dict"].items()
                              if k.startswith("model.") and "running" not in k and "num_batches" not in k)

    (tmp_path / model_yaml).unlink(missing_ok=True)  # the run folder alone: the YAML is recorded in it
    clf = load_classifier(run)
    assert clf.model.task == "classify" and clf.mean == (0.0, 0.0, 0.0) and clf.model.model[-1].nc == 3
    assert clf.model(torch.rand(2, 3, 32, 32)).shape == (2, 3)  # logits in eval

    assert main(["eval", "cls", "--checkpoint", str(run / "best.ckpt"), "--data", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == 6 and report["top1"] == pytest.approx(m["best_val_top1"], abs=1e-6)
    assert main(["predict", "cls", "--checkpoint", str(run), str(root / "val" / "dog"), "--top-k", "2",
                 "--json"]) == 0
    preds = json.loads(capsys.readouterr().out)
    assert len(preds) == 2 and all(len(p["top"]) == 2 and 0 <= p["top"][0]["prob"] <= 1 for p in preds)
    return hp


def test_train_yolov8_cls_then_eval_predict_and_export_from_the_run(folder, tmp_path, capsys):
    hp = _train_eval_predict(tmp_path, folder, capsys, "v8cls", "yolov8-cls.yaml")
    assert hp["name"] == "yolov8-cls.yaml scale n"
    pytest.importorskip("onnxruntime")
    run = tmp_path / "runs" / "v8cls"
    assert main(["export", "onnx", "--checkpoint", str(run), "-o", str(tmp_path / "cls.onnx"), "--verify"]) == 0
    assert "parity: ok" in capsys.readouterr().out and (tmp_path / "cls.onnx").is_file()


def test_train_with_a_cbam_row_inserted(folder, tmp_path, capsys):
    assert main(["yaml", "insert", "yolov8-cls.yaml", "--block", "CBAM", "--after", "C2f", "--at", "8",
                 "-o", "cbam-cls.yaml"]) == 0
    capsys.readouterr()
    rows = yaml.safe_load((tmp_path / "cbam-cls.yaml").read_text())
    assert [r[2] for r in rows["backbone"]][-1] == "CBAM" and rows["head"] == [[-1, 1, "Classify", ["nc"]]]
    hp = _train_eval_predict(tmp_path, folder, capsys, "cbam", "cbam-cls.yaml")
    clf = load_classifier(tmp_path / "runs" / "cbam")
    assert "CBAM" in hp["yaml"] and type(clf.model.model[9]).__name__ == "UltralyticsCBAM"


def test_resume_rebuilds_the_yolo_classifier(folder, tmp_path, capsys):
    config = _config(tmp_path, folder, "again", "yolov8n-cls.yaml")  # the scale letter in the name
    assert main(["train", "cls", "--config", config, "--model.scale", "null"]) == 0
    assert main(["train", "cls", "--config", config, "--model.scale", "null", "--resume", "true",
                 "--trainer.max_epochs", "2"]) == 0
    m = json.loads((tmp_path / "runs" / "again" / "metrics.json").read_text())
    assert m["epochs"] == 2 and m["model"] == "yolov8n-cls.yaml scale n"


@pytest.mark.parametrize("extra,message", [
    (["--model.yaml", "yolov8.yaml"], "a detection YAML (its last row, 22, is Detect); `train cls` needs a "
                                      "YAML ending in a Classify row, e.g. yolov8-cls.yaml; train this one with "
                                      "`train det`"),
    (["--model.yaml", "seg.yaml"], "a segmentation YAML (its last row, 22, is Segment)"),
    (["--model.name", "resnet18"], "model.name='resnet18' and model.yaml='yolov8-cls.yaml' both given"),
    (["--model.attention", "cbam"], "model.attention with model.yaml"),
    (["--model.yaml", "no-such-cls.yaml"], "model.yaml='no-such-cls.yaml': no such file"),
    (["--model.yaml", "null"], "model.scale='n' without model.yaml"),
    (["--model.scale", "q"], "scale 'q' is not defined"),
])
def test_wrong_combinations_are_one_line_errors(folder, tmp_path, capsys, extra, message):
    config = _config(tmp_path, folder, "bad", "yolov8-cls.yaml")
    detector = (CONFIGS / "yolov8.yaml").read_text()
    (tmp_path / "seg.yaml").write_text(detector.replace("Detect, [nc]", "Segment, [nc, 32, 256]"))
    assert main(["train", "cls", "--config", config, *extra]) == 2
    assert message in _error(capsys)
    assert not (tmp_path / "runs" / "bad").exists()
