"""RT-DETR through the detection task: `train det` on our small rtdetr-s.yaml (a tiny generated set) writes
the run, resumes, and `eval det`, `predict det` (NMS-free: one detection per query at most) and `export
onnx --verify` work on it; CBAM inserted after its HGBlock rows trains; the backbone's lower learning rate
reaches the optimizer; rtdetr-s.yaml builds the same network in ultralytics; an ultralytics RT-DETR `.pt`
(written by its trainer's own code) is read without running its pickle, gives ultralytics' outputs, and
keeps them with CBAM inserted (identity start)."""
import contextlib
import io
import json

import torch
import yaml

from tests.io.ultralytics_files import peer_load, save_like_trainer
from tests.models.yolo.test_rtdetr_zoo import assert_same_queries
from tests.peers import import_ultralytics
from vision_attn.cli import main
from vision_attn.data import DigitBoxesConfig, write_digit_boxes
from vision_attn.models import build_detector
from vision_attn.models.yolo import insert_attention_text
from vision_attn.tasks.detect.module import detector_param_groups
from vision_attn.tasks.detect.edit import edit_detector_yaml
from vision_attn.tasks.detect.schedule import WarmupDecay
from vision_attn.tasks.registry import load_run

ARGS = ["--data.img_size", "64", "--data.batch_size", "8", "--data.num_workers", "0", "--model.warmup_epochs", "0.5",
        "--model.min_warmup_steps", "1", "--model.close_mosaic", "1", "--model.plot_images", "2"]


def test_rtdetr_trains_resumes_evaluates_predicts_and_exports(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    root = write_digit_boxes(tmp_path / "data", DigitBoxesConfig(n_train=16, n_val=8, seed=1))
    train = ["train", "det", "--config", "demo_digit_boxes_rtdetr", "--data.data", str(root), *ARGS, "--name", "rt"]
    assert main([*train, "--trainer.max_epochs", "2"]) == 0
    run = tmp_path / "runs" / "rt"
    m = json.loads((run / "metrics.json").read_text())
    assert m["epochs"] == 2 and m["global_step"] == 4 and 0 <= m["val_map"] <= m["val_map50"] <= 1
    ckpt = torch.load(run / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["model_yaml"]["head"][-1][2] == "RTDETRDecoder"
    csv = (run / "csv" / "metrics.csv").read_text().splitlines()[0]
    assert all(f"train/{k}" in csv for k in ("cls", "l1", "giou", "aux", "dn"))
    assert main([*train, "--trainer.max_epochs", "3", "--resume"]) == 0
    m3 = json.loads((run / "metrics.json").read_text())
    assert m3["epochs"] == 3 and m3["global_step"] == 6 and m3["resumed_from"].endswith("last.ckpt")
    capsys.readouterr()

    assert main(["eval", "det", "--checkpoint", str(run), "--data", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == 8 and 0 < report["detections"] <= 8 * 100 * 10
    assert main(["predict", "det", str(root / "coco" / "images" / "val"), "--checkpoint", str(run), "--conf", "0.0",
                 "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert len(found) == 8 and all(0 < len(r["detections"]) <= 100 for r in found)  # top-k of 100 queries, no NMS
    boxes = torch.tensor([d["box"] for r in found for d in r["detections"]])
    assert (boxes[:, 2:] >= boxes[:, :2]).all() and boxes.min() >= 0 and boxes[:, 2].max() <= 160  # original pixels
    assert main(["export", "onnx", "--checkpoint", str(run), "-o", "rt.onnx", "--exporter", "torchscript",
                 "--verify"]) == 0
    assert "parity: ok" in capsys.readouterr().out


def test_cbam_after_the_hgblock_rows_of_rtdetr_s_trains(tmp_path, monkeypatch, request):
    monkeypatch.chdir(tmp_path)
    text = (request.config.rootpath / "configs" / "models" / "rtdetr-s.yaml").read_text()
    cbam = insert_attention_text(text, "CBAM", after="HGBlock", section="backbone", args=[{"zero_init": True}])
    assert cbam.inserted == [2, 5, 8, 11]
    decoder = yaml.safe_load(cbam.text)["head"][-1]
    assert decoder[0] == [23, 26, 29] and decoder[2] == "RTDETRDecoder"  # its inputs re-indexed
    (tmp_path / "rtdetr-s-cbam.yaml").write_text(cbam.text)
    plain = sum(p.numel() for p in build_detector(text, num_classes=10).parameters())
    with_cbam = sum(p.numel() for p in build_detector(cbam.text, num_classes=10).parameters())
    assert with_cbam > plain
    root = write_digit_boxes(tmp_path / "data", DigitBoxesConfig(n_train=8, n_val=4, seed=2))
    assert main(["train", "det", "--config", "demo_digit_boxes_rtdetr", "--data.data", str(root), *ARGS,
                 "--model.yaml", "rtdetr-s-cbam.yaml", "--trainer.max_epochs", "1", "--name", "cbam"]) == 0
    m = json.loads((tmp_path / "runs" / "cbam" / "metrics.json").read_text())
    assert m["params"] == with_cbam and m["epochs"] == 1


def test_the_backbone_rows_train_at_a_fraction_of_the_rate():
    net = build_detector("rtdetr-s.yaml", num_classes=10)
    groups = detector_param_groups(net, weight_decay=1e-4, backbone_lr_scale=0.1)
    backbone = {id(p) for i in range(8) for p in net.model[i].parameters()}
    assert sum(len(g["params"]) for g in groups) == len(list(net.parameters()))
    for g in groups:  # every group is all backbone (scaled) or all head (not)
        inside = {id(p) in backbone for p in g["params"]}
        assert inside == {True} if "lr_scale" in g else inside == {False}
    assert len(detector_param_groups(net, weight_decay=1e-4)) == 3  # one rate: YOLOv8's three groups
    optimizer = torch.optim.AdamW(groups, lr=1e-3)
    WarmupDecay(lr=1e-3, lrf=0.1, total_steps=10, warmup_steps=0, momentum=0.9, warmup_momentum=0.8,
                warmup_bias_lr=0.0).apply(optimizer, 0)
    assert sorted({round(g["lr"], 9) for g in optimizer.param_groups}) == [1e-4, 1e-3]


def test_rtdetr_s_builds_the_same_network_in_ultralytics(request):
    path = request.config.rootpath / "configs" / "models" / "rtdetr-s.yaml"
    ultralytics_tasks = import_ultralytics()
    with torch.device("meta"), contextlib.redirect_stdout(io.StringIO()):
        ours = build_detector(path, num_classes=10)
        theirs = ultralytics_tasks.RTDETRDetectionModel({**yaml.safe_load(path.read_text()), "nc": 10, "scale": "s"},
                                                        verbose=False)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters()) == 3_304_072
    assert list(ours.state_dict()) == list(theirs.state_dict())


def test_an_ultralytics_rtdetr_pt_loads_safely_and_keeps_its_outputs_with_cbam_inserted(tmp_path):
    _, best = save_like_trainer("yolov8n-rtdetr.yaml", tmp_path / "peer", nc=3, imgsz=64,
                                model_class="RTDETRDetectionModel")
    run = load_run(str(best))
    assert run.task == "det" and run.model.task == "rtdetr" and run.classes == ["class0", "class1", "class2"]
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        _, (boxes, logits, *_) = peer_load(best)(x)  # its raw (1, B, Q, 4) boxes and (1, B, Q, nc) logits
        theirs = torch.cat([boxes[0] * 64, logits[0].sigmoid()], -1)
        assert_same_queries(run.model.eval()(x).transpose(1, 2), theirs)
    edit = edit_detector_yaml(best, "insert", block="CBAM", after="C2f", output=tmp_path / "cbam.yaml",
                              checkpoint_out=tmp_path / "cbam.pt")
    assert edit.inserted and len(edit.weights.transferred) == edit.weights.total
    cbam = load_run(str(tmp_path / "cbam.pt")).model  # a run checkpoint of the edited YAML, as eval det reads it
    assert sum(p.numel() for p in cbam.parameters()) > sum(p.numel() for p in run.model.parameters())
    with torch.no_grad():
        assert_same_queries(cbam.eval()(x).transpose(1, 2), theirs)  # the inserted blocks start as the identity
