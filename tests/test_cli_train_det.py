"""`vision-attn train det / eval det / predict det` on a tiny generated digit-boxes set: the run
folder, its metrics, resume, predictions, and one-line errors (exit 2) for bad configurations."""
import json

import pytest
import torch

from tests._configs import tiny_detection
from vision_attn.cli import main
from vision_attn.data import DigitBoxesConfig, write_digit_boxes


@pytest.fixture
def tiny(tmp_path, monkeypatch, request):
    """A generated set (16 train / 8 val images) and a config for it, cwd = tmp_path."""
    yaml_path = request.config.rootpath / "configs" / "models" / "yolov8.yaml"
    monkeypatch.chdir(tmp_path)
    root = write_digit_boxes(tmp_path / "data", DigitBoxesConfig(n_train=16, n_val=8, seed=1))
    config = tmp_path / "tiny.yaml"
    config.write_text(tiny_detection(yaml_path, root))
    return config, root


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def test_train_det_writes_the_run_folder_then_resume_eval_and_predict(tiny, capsys, tmp_path):
    config, root = tiny
    assert main(["train", "det", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    run = tmp_path / "runs" / "tiny"
    assert "final val mAP@.5:" in out and "run folder: runs/tiny" in out
    for name in ("config.yaml", "best.ckpt", "last.ckpt", "model.safetensors", "metrics.json", "csv/metrics.csv",
                 "loss.png", "map.png", "predictions.png"):
        assert (run / name).is_file(), name
    assert any((run / "tensorboard").glob("events.out.tfevents.*"))
    m = json.loads((run / "metrics.json").read_text())
    assert m["epochs"] == 2 and m["global_step"] == 2 * 2  # 16 images, batch 8
    assert 0 <= m["val_map"] <= m["val_map50"] <= 1 and m["val_images"] == 8 and m["train_images"] == 16
    assert set(m["per_class_ap"]) == {str(i) for i in range(10)}
    assert m["params"] > 1e6 and m["gflops"] > 0 and m["ema"] is True and m["scale"] == "n"
    ckpt = torch.load(run / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["task"] == "det" and "backbone" in ckpt["model_yaml"] and ckpt["model_scale"] == "n"
    assert ckpt["hyper_parameters"]["class_names"] == [str(i) for i in range(10)]

    assert main(["train", "det", "--config", str(config), "--resume", "--trainer.max_epochs", "3"]) == 0
    capsys.readouterr()
    m3 = json.loads((run / "metrics.json").read_text())
    assert m3["epochs"] == 3 and m3["global_step"] == 6 and m3["resumed_from"].endswith("last.ckpt")

    assert main(["eval", "det", "--checkpoint", str(run / "best.ckpt"), "--data", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == 8 and 0 <= report["map"] <= report["map50"] <= 1
    assert set(report["per_class"]) == {str(i) for i in range(10)}

    images = root / "coco" / "images" / "val"
    assert main(["predict", "det", str(images), "--checkpoint", str(run), "-o", "pred", "--conf", "0.0",
                 "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert len(results) == 8 and all("detections" in r for r in results)
    saved = json.loads((tmp_path / "pred" / "detections.json").read_text())
    assert [r["image"] for r in saved] == [r["image"] for r in results]
    assert len(list((tmp_path / "pred").glob("*.png"))) == 8
    first = next(r for r in results if r["detections"])  # conf 0: the untrained model finds something
    d = first["detections"][0]
    assert len(d["box"]) == 4 and 0 <= d["box"][0] <= d["box"][2] <= first["width"] and d["class"] in "0123456789"


@pytest.mark.parametrize("override, message", [
    (["--model.lrr", "0.1"], "did you mean model.lr"),
    (["--model.optimizer", "adam"], "model.optimizer"),
    (["--data.img_size", "100"], "data.img_size=100: give a multiple of 32"),
    (["--model.yaml", "missing.yaml"], "model.yaml='missing.yaml': no such file"),
    (["--data.data", "no_such_folder"], "no_such_folder"),
    (["--model.ema_decay", "1.5"], "model.ema_decay=1.5"),
])
def test_train_det_config_errors_are_one_line(tiny, capsys, override, message):
    config, _ = tiny
    assert main(["train", "det", "--config", str(config), *override]) == 2
    assert message in _error(capsys)


def test_eval_det_rejects_a_missing_checkpoint_and_other_classes(tiny, capsys, tmp_path):
    _, root = tiny
    assert main(["eval", "det", "--checkpoint", str(tmp_path / "nope.ckpt"), "--data", str(root)]) == 2
    assert "no such checkpoint" in _error(capsys)
    assert main(["predict", "det", str(tmp_path / "none.png"), "--checkpoint", str(tmp_path)]) == 2
    assert "no such checkpoint" in _error(capsys)
