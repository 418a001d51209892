"""Exported graphs run in onnxruntime with PyTorch's outputs (logits and detector probabilities within
1e-4, decoded boxes within 1e-3 px), on random batches of 1 and 3 through a dynamic batch axis and on a
real photo; the graphs hold standard ONNX operators only (no oneDNN fast path)."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from vision_attn.export import export_onnx, load_deployable, onnx_session, run_onnx  # noqa: E402
from vision_attn.export.verify import verify_onnx  # noqa: E402

CASES = [  # (source, img_size, exporter); Swin: test_onnx_swin.py
    ({"model": "vit_tiny_patch16_224"}, 64, "dynamo"),
    ({"model": "deit_tiny_distilled_patch16_224"}, 64, "torchscript"),  # dynamo: vit_tiny, yolov8n-cbam
    ({"yaml": "configs/models/yolov8-cbam.yaml", "scale": "n"}, 128, "dynamo"),
]


@pytest.mark.parametrize("source,img_size,exporter", CASES,
                         ids=["vit_tiny", "deit_tiny_distilled", "yolov8n-cbam"])
def test_parity_dynamic_batch(tmp_path, source, img_size, exporter):
    check_parity(tmp_path, source, img_size, exporter)


def calibrate_batchnorm(model: torch.nn.Module, size: tuple[int, int]) -> None:
    """Batch-norm statistics from one random batch: an untrained detector's features otherwise fade to
    ~1e-7 before its head, every box comes out the same and a box comparison proves nothing."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None  # cumulative average: after one batch, exactly its statistics
    model.train()
    with torch.no_grad():
        model(torch.rand(4, 3, *size))
    model.eval()


def check_parity(tmp_path, source, img_size, exporter):
    dep = load_deployable(**source, img_size=img_size)
    if dep.kind == "detector":
        calibrate_batchnorm(dep.model, dep.input_size)
    path = tmp_path / "model.onnx"
    result = export_onnx(dep.model, path, dep.input_size, dynamic_batch=True, exporter=exporter)
    assert path.is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]  # one file, no leftovers
    assert all("::" not in op for op in result.ops), result.ops  # standard domain only: no mkldnn/custom op
    assert dep.kind == "detector" or "MatMul" in result.ops or "Gemm" in result.ops
    report = verify_onnx(path, dep, batches=(1, 3))
    assert [c.input for c in report.checks] == ["random batch 1", "random batch 3", "china.jpg"]
    assert report.ok, report.max_diffs
    expected = {"detector": {"boxes", "scores"}, "classifier": {"logits"}}[dep.kind]
    assert set(report.max_diffs) == expected


def test_deit_distilled_exports_the_eval_average(tmp_path):
    """DeiT-distilled's eval output is the mean of its two heads: one (B, classes) output in the graph."""
    dep = load_deployable(model="deit_tiny_distilled_patch16_224", img_size=32)
    path = tmp_path / "deit.onnx"
    export_onnx(dep.model, path, dep.input_size, exporter="torchscript")
    session = onnx_session(path)
    assert [o.name for o in session.get_outputs()] == ["output"]
    x = torch.randn(1, 3, 32, 32)
    out = run_onnx(session, x)[0]
    m = dep.model
    with torch.no_grad():
        feats = m.forward_features(x) if hasattr(m, "forward_features") else None
        ref = m(x)
    assert out.shape == (1, 1000)
    assert (out - ref).abs().max() <= 1e-4
    if feats is not None and hasattr(m, "head_dist"):
        both = (m.head(feats[:, 0]) + m.head_dist(feats[:, 1])) / 2
        assert (out - both).abs().max() <= 1e-4


def test_detector_graph_decodes_boxes(tmp_path):
    """A YAML detector without attention rows: (B, 4 + nc, anchors), boxes in input pixels."""
    dep = load_deployable(yaml="configs/models/yolov8.yaml", scale="n", img_size=(96, 128))
    calibrate_batchnorm(dep.model, dep.input_size)
    path = tmp_path / "det.onnx"
    export_onnx(dep.model, path, dep.input_size, exporter="torchscript")
    out = run_onnx(onnx_session(path), torch.rand(1, 3, 96, 128))[0]
    anchors = sum((96 // s) * (128 // s) for s in (8, 16, 32))
    assert out.shape == (1, 4 + 80, anchors)
    cx, cy = out[0, 0], out[0, 1]
    assert 0 < float(cx.mean()) < 128 and 0 < float(cy.mean()) < 96  # centres lie in the image
    assert float(out[0, 4:].min()) >= 0 and float(out[0, 4:].max()) <= 1  # probabilities


def test_detector_with_nms_matches_postprocess(tmp_path):
    """NMS inside the graph (TorchScript exporter, one image): the same detections as
    vision_attn.models.yolo.postprocess (conf 0: every anchor is a candidate, so NMS really prunes) of
    the same network exported without NMS, run in onnxruntime: both NMS see the same numbers (PyTorch's
    own output differs by float rounding, which can flip a near-tie of the IoU test); PyTorch's
    detections are compared too, allowing for such a flip."""
    from vision_attn.export.nms import DetectorWithNMS
    from vision_attn.export.sample import letterbox_input
    from vision_attn.models.yolo.postprocess import postprocess

    dep = load_deployable(yaml="configs/models/yolov8-cbam.yaml", scale="n", img_size=128)
    calibrate_batchnorm(dep.model, dep.input_size)
    model = DetectorWithNMS(dep.model, conf=0.0, iou=0.5).eval()
    path = tmp_path / "nms.onnx"
    export_onnx(model, path, dep.input_size, exporter="torchscript", output_names=["detections"])
    x = letterbox_input((128, 128))
    out = run_onnx(onnx_session(path), x)[0]
    plain = tmp_path / "plain.onnx"
    export_onnx(dep.model, plain, dep.input_size, exporter="torchscript", output_names=["boxes_scores"])
    ref = postprocess(run_onnx(onnx_session(plain), x)[0], conf=0.0, iou=0.5)[0]
    with torch.no_grad():
        eager = postprocess(dep.model(x), conf=0.0, iou=0.5)[0]
    assert abs(len(eager) - len(ref)) <= 2 and (eager.boxes[0] - ref.boxes[0]).abs().max() <= 1e-2  # the best box
    anchors = sum((128 // s) ** 2 for s in (8, 16, 32))
    assert 0 < len(ref) < anchors  # NMS removed boxes
    assert out.shape == (len(ref), 6)
    assert ref.boxes.std() > 1  # real, varied boxes
    assert (out[:, :4] - ref.boxes).abs().max() <= 1e-3
    assert (out[:, 4] - ref.scores).abs().max() <= 1e-4
    assert torch.equal(out[:, 5].long(), ref.labels)
    report = verify_onnx(path, dep, model=model)
    assert report.ok
