"""A segmentation model exported: ONNX (checked in onnxruntime), OpenVINO IR and TorchScript give
PyTorch's rows (boxes, class probabilities, mask coefficients) and prototypes; with --nms the ONNX graph
ends with the detections and each one's mask logits, the same detections as postprocess and the same masks
as prediction makes from them."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.export.test_onnx_parity import calibrate_batchnorm
from vision_attn.cli import main
from vision_attn.export import export_onnx, load_deployable, onnx_session, run_onnx
from vision_attn.export.nms import SegmenterWithNMS
from vision_attn.export.sample import letterbox_input
from vision_attn.export.verify import verify_onnx
from vision_attn.models.yolo.masks import crop_to_boxes, instance_masks
from vision_attn.models.yolo.postprocess import postprocess

SEG_YAML = "configs/models/yolov8-seg.yaml"


def _segmenter(size: int):
    torch.manual_seed(0)
    dep = load_deployable(yaml=SEG_YAML, scale="n", img_size=size)
    calibrate_batchnorm(dep.model, dep.input_size)
    return dep


def test_segmenter_graph_gives_rows_and_prototypes(tmp_path):
    dep = _segmenter(96)
    assert dep.kind == "segmenter" and [n for n, _ in dep.outputs] == ["boxes_scores_coeffs", "protos"]
    path = tmp_path / "seg.onnx"
    export_onnx(dep.model, path, dep.input_size, dynamic_batch=True, exporter="torchscript",
                output_names=[n for n, _ in dep.outputs])
    rows, protos = run_onnx(onnx_session(path), torch.rand(2, 3, 96, 96))
    anchors = sum((96 // s) ** 2 for s in (8, 16, 32))
    assert rows.shape == (2, 4 + 80 + 32, anchors) and protos.shape == (2, 32, 24, 24)
    report = verify_onnx(path, dep, batches=(1, 3))
    assert report.ok and set(report.max_diffs) == {"boxes", "scores", "coeffs", "protos"}
    for check in report.checks:  # onnxruntime no further from a float64 run than PyTorch float32 itself (x4)
        assert all(check.exact[k] <= max(1e-4, 4 * check.own[k]) for k in ("coeffs", "protos")), check


def test_segmenter_with_nms_gives_postprocess_detections_and_their_masks(tmp_path):
    dep = _segmenter(128)
    head = dep.model.model[-1]
    with torch.no_grad():  # an untrained head's mask logits reach 1e6 (sigmoid all 0 or 1): scale them to a
        x = letterbox_input((128, 128))  # trained model's few units, so that the masks have real edges
        rows, protos = dep.model(x)
        scale = float(torch.einsum("bma,bmhw->bahw", rows[:, -32:], protos).abs().median()) / 3
        head.proto.cv3.bn.weight /= scale
        head.proto.cv3.bn.bias /= scale
    model = SegmenterWithNMS(dep.model, conf=0.0, iou=0.5).eval()
    path = tmp_path / "nms.onnx"
    export_onnx(model, path, dep.input_size, exporter="torchscript", output_names=["detections", "masks"])
    dets, masks = run_onnx(onnx_session(path), x)
    with torch.no_grad():
        pred, protos = dep.model(x)
    ref = postprocess(pred, conf=0.0, iou=0.5, nm=32)[0]
    assert 0 < len(ref) and dets.shape == (len(ref), 6) and masks.shape == (len(ref), 32, 32)
    # an untrained head's box distributions are sharp: float32 rounding moves an edge by up to ~0.03 px
    # (verify_onnx below holds the graph to 4x PyTorch float32's own distance from float64)
    assert torch.allclose(dets[:, :4], ref.boxes, atol=0.05) and torch.equal(dets[:, 5].long(), ref.labels)
    # the graph's mask logits, resized, thresholded and cropped as prediction does it, are prediction's masks
    binary = instance_masks(protos[0], ref.coeffs, ref.boxes, (128, 128))
    logits = F.interpolate(masks[None], (128, 128), mode="bilinear", align_corners=False)[0]
    from_graph = crop_to_boxes((logits > 0).to(torch.uint8), ref.boxes)
    assert 0.05 < binary.float().mean() < 0.95  # real edges, neither empty nor full
    assert (from_graph == binary).float().mean() > 0.999  # a pixel within float32 rounding of 0 may flip
    assert verify_onnx(path, dep, model=model).ok


def test_export_commands_verify_a_segmenter_in_openvino_and_torchscript(tmp_path, capsys):
    pytest.importorskip("openvino")
    base = ["--yaml", SEG_YAML, "--scale", "n", "--img-size", "64", "--verify"]
    assert main(["export", "openvino", *base, "--exporter", "torchscript", "-o", str(tmp_path / "seg.xml")]) == 0
    out = capsys.readouterr().out
    assert "output 'boxes_scores_coeffs'" in out and "'protos'" in out and "parity: ok" in out
    assert main(["export", "torchscript", *base, "-o", str(tmp_path / "seg.pt")]) == 0
    out = capsys.readouterr().out
    assert "parity: ok" in out and "protos" in out
    assert main(["export", "onnx", *base, "--nms", "--exporter", "torchscript", "-o", str(tmp_path / "nms.onnx")]) == 0
    out = capsys.readouterr().out
    assert "output 'detections' (N, 6)" in out and "output 'masks' (N, H/4, W/4): each instance's mask logits" in out and "parity: ok" in out
