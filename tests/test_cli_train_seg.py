"""`vision-attn train seg / eval seg / predict seg` on a tiny generated digit-masks set: the run folder with
box and mask mAP, exact resume, evaluation and prediction from the run folder (RLE masks that decode to
the drawn shapes), and one-line errors (exit 2) for a detector YAML in train seg and a -seg YAML in
train det."""
import json

import numpy as np
import pytest
import torch

from tests._configs import tiny_detection
from vision_attn.analysis.compare import run_metric
from vision_attn.cli import main
from vision_attn.data import DigitBoxesConfig
from vision_attn.data.digit_masks import write_digit_masks
from vision_attn.data.masks import decode_rle


@pytest.fixture
def tiny(tmp_path, monkeypatch, request):
    """A generated set with masks (16 train / 8 val images) and a config for it, cwd = tmp_path."""
    models = request.config.rootpath / "configs" / "models"
    monkeypatch.chdir(tmp_path)
    root = write_digit_masks(tmp_path / "data", DigitBoxesConfig(n_train=16, n_val=8, seed=1))
    config = tmp_path / "tiny.yaml"
    config.write_text(tiny_detection(models / "yolov8-seg.yaml", root))
    return config, root, models


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def test_train_seg_writes_the_run_then_resumes_evaluates_and_predicts(tiny, capsys, tmp_path):
    config, root, _ = tiny
    assert main(["train", "seg", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    run = tmp_path / "runs" / "tiny"
    assert "final val box mAP@.5:" in out and "mask mAP@.5:" in out
    for name in ("best.ckpt", "last.ckpt", "model.safetensors", "metrics.json", "loss.png", "map.png",
                 "predictions.png"):
        assert (run / name).is_file(), name
    m = json.loads((run / "metrics.json").read_text())
    assert m["epochs"] == 2 and m["global_step"] == 4 and m["mask_ratio"] == 4
    assert 0 <= m["val_mask_map"] <= m["val_mask_map50"] <= 1 and 0 <= m["val_map"] <= m["val_map50"] <= 1
    assert set(m["per_class_mask_ap"]) == {str(i) for i in range(10)}
    assert m["task"] == "seg" and run_metric(m, run) == (m["val_mask_map"], "mask mAP@.5:.95")  # what compare ranks by
    ckpt = torch.load(run / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["task"] == "seg" and ckpt["model_yaml"]["head"][-1][2] == "Segment"
    csv = (run / "csv" / "metrics.csv").read_text().splitlines()[0]
    assert "train/seg" in csv and "val/mask_mAP50-95" in csv

    assert main(["train", "seg", "--config", str(config), "--resume", "--trainer.max_epochs", "3"]) == 0
    m3 = json.loads((run / "metrics.json").read_text())
    assert m3["epochs"] == 3 and m3["global_step"] == 6 and m3["resumed_from"].endswith("last.ckpt")
    capsys.readouterr()

    assert main(["eval", "seg", "--checkpoint", str(run), "--data", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == 8 and 0 <= report["mask_map"] <= report["mask_map50"] <= 1
    assert set(report["per_class_mask"]) == set(report["per_class"])

    images = root / "coco" / "images" / "val"
    assert main(["predict", "seg", str(images), "--checkpoint", str(run), "-o", "pred", "--conf", "0.0"]) == 0
    assert "with masks and segments.json written to pred" in capsys.readouterr().out
    found = json.loads((tmp_path / "pred" / "segments.json").read_text())
    assert len(found) == 8 and all((tmp_path / "pred" / f"{p.stem}.png").is_file() for p in sorted(images.iterdir()))
    first = next(d for r in found for d in r["detections"])
    mask = decode_rle(first["mask"])
    assert mask.shape == (found[0]["height"], found[0]["width"]) and set(np.unique(mask)) <= {0, 1}
    x1, y1, x2, y2 = first["box"]
    ys, xs = np.nonzero(mask)
    if len(xs):  # a mask lies inside its box (cropped there), up to the rounding of the way back
        assert xs.min() >= x1 - 2 and xs.max() <= x2 + 2 and ys.min() >= y1 - 2 and ys.max() <= y2 + 2
    capsys.readouterr()

    # the run exported (rows with coefficients, and prototypes), checked in onnxruntime, and run there by eval and
    # predict: the same masks and metrics as PyTorch
    assert main(["export", "onnx", "--checkpoint", str(run), "-o", "seg.onnx", "--exporter", "torchscript",
                 "--dynamic-batch", "--verify"]) == 0
    out = capsys.readouterr().out
    assert "output 'boxes_scores_coeffs' (B, 4 + nc + nm, anchors)" in out and "output 'protos'" in out
    assert "parity: ok" in out and "coeffs" in out and "protos" in out
    assert main(["eval", "seg", "--checkpoint", str(run), "--data", str(root), "--json", "--runtime",
                 "onnxruntime"]) == 0
    ort_report = json.loads(capsys.readouterr().out)
    for key in ("map", "map50", "mask_map", "mask_map50"):
        assert abs(ort_report[key] - report[key]) < 1e-3, key
    assert main(["predict", "seg", str(images), "--checkpoint", str(run), "--conf", "0.0", "--json", "--runtime",
                 "onnxruntime"]) == 0
    ort_found = json.loads(capsys.readouterr().out)
    # at --conf 0 an untrained model keeps hundreds of near-equal boxes, whose NMS order float32 rounding can
    # change: the five best of each image are the same instances with the same masks
    pairs = [(a, b) for r, q in zip(found, ort_found) for a, b in zip(r["detections"][:5], q["detections"][:5])]
    assert len(pairs) == 40 and all(a["class"] == b["class"] for a, b in pairs)
    assert all(max(abs(u - v) for u, v in zip(a["box"], b["box"])) < 0.1 for a, b in pairs)
    same = [(decode_rle(a["mask"]) == decode_rle(b["mask"])).mean() for a, b in pairs]
    # a pixel whose logit is within float32 rounding of 0 may flip (a 3-epoch model's logits are small)
    assert np.mean(same) > 0.99 and min(same) > 0.9, same


def test_a_detector_yaml_in_train_seg_and_a_seg_yaml_in_train_det_are_one_line_errors(tiny, capsys):
    config, _, models = tiny
    assert main(["train", "seg", "--config", str(config), "--model.yaml", str(models / "yolov8.yaml")]) == 2
    assert "not a Segment head; train seg takes a -seg YAML" in _error(capsys)
    assert main(["train", "det", "--config", str(config)]) == 2
    assert "a segment head; train det takes a detector YAML (yolov8n.yaml, ...), train seg this one" in _error(capsys)


def test_eval_seg_refuses_a_detection_run(tiny, capsys, tmp_path):
    config, root, models = tiny
    det_config = tmp_path / "det.yaml"
    det_config.write_text(tiny_detection(models / "yolov8.yaml", root, {"trainer.max_epochs": 1}))
    assert main(["train", "det", "--config", str(det_config)]) == 0
    capsys.readouterr()
    assert main(["eval", "seg", "--checkpoint", str(tmp_path / "runs" / "det"), "--data", str(root)]) == 2
    assert "the checkpoint of a det run, not of a seg run" in _error(capsys)


def test_the_commands_offer_every_task_of_the_registry():
    from vision_attn.commands.train import TASK_NAMES
    from vision_attn.tasks import TASKS

    assert TASK_NAMES == tuple(TASKS)[:len(TASK_NAMES)]


def test_predictions_png_of_a_segmentation_run_shows_masks(tiny, capsys, tmp_path, monkeypatch):
    """A one-epoch run whose predictions all score under the drawing threshold still draws the true
    masks' outlines, so its predictions.png is not a detection run's picture."""
    from vision_attn.tasks.detect.plots import prediction_grid
    from vision_attn.tasks.segment import plots

    config, _, _ = tiny
    drawn = []
    real = plots.draw_outlines
    monkeypatch.setattr(plots, "draw_outlines", lambda tile, masks, *a, **k: drawn.append(len(masks)) or real(tile, masks, *a, **k))
    assert main(["train", "seg", "--config", str(config), "--trainer.max_epochs", "1", "--model.plot_images", "2",
                 "--trainer.enable_progress_bar", "false"]) == 0
    assert (tmp_path / "runs" / "tiny" / "predictions.png").is_file() and len(drawn) == 2 and min(drawn) > 0
    images = torch.zeros(1, 3, 32, 32)
    mask = np.zeros((1, 8, 8), np.uint8)
    mask[0, 2:6, 2:6] = 1
    none = [{"boxes": np.zeros((0, 4)), "scores": np.zeros(0), "labels": np.zeros(0, int)}]
    truth = [{"boxes": np.array([[4.0, 4.0, 28.0, 28.0]]), "labels": np.array([0]), "masks": mask}]
    assert not np.array_equal(plots.segment_grid(images, none, truth, ["a"]), prediction_grid(images, none, truth, ["a"]))
