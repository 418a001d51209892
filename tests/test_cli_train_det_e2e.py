"""An end-to-end detector (YOLO26n: one-to-one branch, reg_max 1) through the CLI on a tiny generated
set at 64 px: `train det` picks the end-to-end loss and moves its branch weights each epoch (kept in the
checkpoint), `eval det` / `predict det` read the one-to-one branch with a top-k and no NMS, and
`export onnx --nms` writes that top-k (no NMS) and says so."""
import json
import re

import pytest
import torch

from vision_attn.cli import main
from vision_attn.data import DigitBoxesConfig, write_digit_boxes
from vision_attn.tasks.plots import epoch_history
from tests._configs import tiny_detection

ANCHORS_64 = 8 * 8 + 4 * 4 + 2 * 2  # strides 8, 16, 32 at 64 px


@pytest.fixture
def tiny_e2e(tmp_path, monkeypatch, request):
    yaml_path = request.config.rootpath / "configs" / "models" / "yolo26.yaml"
    monkeypatch.chdir(tmp_path)
    root = write_digit_boxes(tmp_path / "data", DigitBoxesConfig(n_train=8, n_val=4, seed=2))
    config = tmp_path / "tiny.yaml"
    config.write_text(tiny_detection(yaml_path, root))
    return config, root, yaml_path


def test_yolo26_trains_with_the_end_to_end_loss_and_predicts_without_nms(tiny_e2e, capsys, tmp_path):
    config, root, yaml_path = tiny_e2e
    assert main(["train", "det", "--config", str(config)]) == 0
    capsys.readouterr()
    run = tmp_path / "runs" / "tiny"
    weights = epoch_history(run / "csv" / "metrics.csv")["train/o2m_weight"]
    assert weights == pytest.approx({0: 0.8, 1: 0.1})  # YOLO26's one-to-many weight, first to last epoch
    ckpt = torch.load(run / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["state_dict"]["criterion._extra_state"] == {"epoch": 1, "epochs": 2}
    assert any(k.startswith("model.model.23.one2one_cv2.") for k in ckpt["state_dict"])

    assert main(["eval", "det", "--checkpoint", str(run), "--data", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == 4 and 0 <= report["map"] <= report["map50"] <= 1

    # the head's raw distances made negative (as early in training): evaluation still completes
    ckpt = torch.load(run / "best.ckpt", map_location="cpu", weights_only=True)
    box_biases = re.compile(r"(model|ema\.module)\.model\.23\.(one2one_)?cv2\.\d\.2\.bias")  # live and EMA
    for key, value in ckpt["state_dict"].items():
        if box_biases.fullmatch(key):
            value.fill_(-50.0)
    torch.save(ckpt, tmp_path / "inverted.ckpt")
    assert main(["eval", "det", "--checkpoint", str(tmp_path / "inverted.ckpt"), "--data", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["images"] == 4

    # conf 0: every image keeps exactly its top-k (anchor, class) pairs; an NMS would have dropped overlaps
    images = root / "coco" / "images" / "val"
    assert main(["predict", "det", str(images), "--checkpoint", str(run), "--conf", "0.0", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert len(results) == 4 and all(len(r["detections"]) == ANCHORS_64 for r in results)
    scores = [d["score"] for d in results[0]["detections"]]
    assert scores == sorted(scores, reverse=True)

    # attn-map reads the detection run by its folder: YOLO26's C2PSA block, drawn on a val image
    drawn = tmp_path / "attn.png"
    image = sorted(images.iterdir())[0]
    assert main(["attn-map", "--checkpoint", str(run), "--image", str(image), "-o", str(drawn)]) == 0
    assert "PSA block" in capsys.readouterr().out and drawn.stat().st_size > 0

    onnx = tmp_path / "yolo26n.onnx"
    assert main(["export", "onnx", "--yaml", str(yaml_path), "--scale", "n", "--img-size", "64", "--nms",
                 "--dynamic-batch", "--verify", "-o", str(onnx)]) == 0
    out = capsys.readouterr().out
    assert "adds no NMS" in out and "(B, K, 6)" in out and "parity: ok" in out
    from vision_attn.export import graph_ops

    _, ops, _, _, outputs = graph_ops(onnx)
    assert "TopK" in ops and "NonMaxSuppression" not in ops and outputs == ["detections"]
