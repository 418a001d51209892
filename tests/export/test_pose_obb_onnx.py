"""The keypoint and oriented-box networks export to ONNX (the graph of their eval output: boxes, class
probabilities, then the decoded keypoints or the angle, for any batch size) and onnxruntime gives
PyTorch's rows."""
from __future__ import annotations

import pytest
import torch

from vision_attn.export import export_onnx, onnx_session, run_onnx
from vision_attn.models.yolo import build_detector


@pytest.mark.parametrize("yaml,extra", [("configs/models/yolov8-pose.yaml", 4 * 3), ("configs/models/yolov8-obb.yaml", 1)])
def test_pose_and_obb_graphs_give_pytorch_rows(yaml, extra, tmp_path):
    torch.manual_seed(0)
    kpt_shape = (4, 3) if "pose" in yaml else None
    model = build_detector(yaml, scale="n", num_classes=2, kpt_shape=kpt_shape).eval()
    path = tmp_path / "net.onnx"
    export_onnx(model, path, (64, 64), dynamic_batch=True, exporter="torchscript", output_names=["rows"])
    x = torch.rand(3, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    (rows,) = run_onnx(onnx_session(path), x)
    with torch.no_grad():
        expected = model(x)
    assert rows.shape == (3, 4 + 2 + extra, 8 * 8 + 4 * 4 + 2 * 2)
    torch.testing.assert_close(rows, expected, rtol=1e-4, atol=1e-3)  # pixel coordinates up to 64
