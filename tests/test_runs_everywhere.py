"""A classification run and a detection run, each trained for a few steps, go through eval, predict,
flops, compare, export onnx (with and without --nms) and export quantize by their run folder alone:
one loader (vision_attn.tasks.load_run) reads the task and model description from the checkpoint."""
import json

import onnx
import pytest

from tests.folders import make_folder
from vision_attn.cli import main
from vision_attn.data import DigitBoxesConfig, write_digit_boxes

CLS = """\
model:
  name: vit_tiny_patch16_224
  model_kwargs: {{patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2}}
  warmup_epochs: 0.5
data: {{root: {root}, img_size: 16, batch_size: 8, num_workers: 0}}
trainer: {{accelerator: cpu, max_epochs: 1, limit_train_batches: 2, enable_progress_bar: false}}
"""
DET = """\
model: {{yaml: yolov8n.yaml, warmup_epochs: 0, plot_images: 0, ema_decay: null}}
data: {{data: {root}, img_size: 64, batch_size: 8, num_workers: 0}}
trainer: {{accelerator: cpu, max_epochs: 1, limit_train_batches: 2, enable_progress_bar: false}}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two trained runs in one folder: runs/cls (3 classes) and runs/det (10 digit classes)."""
    tmp = tmp_path_factory.mktemp("runs")
    folders = make_folder(tmp / "folders")
    boxes = write_digit_boxes(tmp / "boxes", DigitBoxesConfig(n_train=16, n_val=8, seed=1))
    (tmp / "cls.yaml").write_text(CLS.format(root=folders))
    (tmp / "det.yaml").write_text(DET.format(root=boxes))
    for task, name in (("cls", "cls"), ("det", "det")):
        assert main(["train", task, "--config", str(tmp / f"{name}.yaml"), "--runs_dir", str(tmp / "runs")]) == 0
    return tmp, folders, boxes


def test_eval_and_predict_by_the_run_folder(runs, capsys):
    tmp, folders, boxes = runs
    assert main(["eval", "cls", "--checkpoint", str(tmp / "runs" / "cls"), "--data", str(folders), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["images"] == 9
    assert main(["eval", "det", "--checkpoint", str(tmp / "runs" / "det"), "--data", str(boxes), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["images"] == 8
    assert main(["predict", "cls", str(folders / "val" / "cat"), "--checkpoint", str(tmp / "runs" / "cls"),
                 "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3
    assert main(["predict", "det", str(boxes / "coco" / "images" / "val"), "--checkpoint", str(tmp / "runs" / "det"),
                 "--json", "--conf", "0.0"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 8
    # the other task's command names the run's own task
    assert main(["eval", "det", "--checkpoint", str(tmp / "runs" / "cls"), "--data", str(boxes)]) == 2
    assert "use `vision-attn eval cls`" in capsys.readouterr().err


def test_flops_and_compare_by_the_run_folder(runs, capsys):
    tmp, _, _ = runs
    for name in ("cls", "det"):
        assert main(["flops", str(tmp / "runs" / name), "--json"]) == 0
        counted = json.loads(capsys.readouterr().out)
        recorded = json.loads((tmp / "runs" / name / "metrics.json").read_text())
        assert counted["params"] == recorded["params"] and counted["kind"] == "checkpoint"
    assert main(["compare", str(tmp / "runs" / "cls"), str(tmp / "runs" / "det"), "--no-latency", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["metric_name"] == "top-1" and rows[1]["metric_name"] == "mAP@.5:.95"
    metrics = [json.loads((tmp / "runs" / name / "metrics.json").read_text()) for name in ("cls", "det")]
    assert [r["metric"] for r in rows] == [metrics[0]["val_top1"], metrics[1]["val_map"]]


@pytest.mark.parametrize("name, extra, output", [
    ("cls", [], "logits"),
    ("det", [], "boxes_scores"),
    ("det", ["--nms", "--exporter", "torchscript"], "detections"),
])
def test_export_onnx_by_the_run_folder(runs, capsys, name, extra, output):
    tmp, _, _ = runs
    out = tmp / f"{name}{'-nms' if extra else ''}.onnx"
    assert main(["export", "onnx", "--checkpoint", str(tmp / "runs" / name), "-o", str(out), "--verify", *extra]) == 0
    assert "parity: ok" in capsys.readouterr().out
    graph = onnx.load(str(out)).graph
    assert graph.output[0].name == output
    size = 16 if name == "cls" else 64  # the run's own input size
    assert [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim][-2:] == [size, size]


@pytest.mark.parametrize("name", ["cls", "det"])
def test_export_quantize_by_the_run_folder(runs, capsys, name):
    tmp, folders, _ = runs
    data = ["--data", str(folders)] if name == "cls" else []
    out = tmp / f"{name}.int8.onnx"
    assert main(["export", "quantize", "--checkpoint", str(tmp / "runs" / name), "-o", str(out), "--rounds", "2",
                 "--batch", "2", "--exporter", "torchscript", *data]) == 0
    text = capsys.readouterr().out
    assert out.is_file() and "latency ms" in text
    assert ("top-1 on 9 images" in text) == (name == "cls")
