"""swin_tiny exported with a dynamic batch at 224 and at a non-square 192x256 (the model stays
configured at 224; the input is padded to whole windows inside the graph), checked in onnxruntime at
batch 1 and 3 and on a photo. The TorchScript exporter: 5-7x faster to export than the dynamo one here,
which test_onnx_parity.py covers."""
from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime")

from tests.export.test_onnx_parity import check_parity  # noqa: E402


@pytest.mark.parametrize("img_size", [224, (192, 256)], ids=["224", "192x256"])
def test_swin_tiny_parity(tmp_path, img_size):
    check_parity(tmp_path, {"model": "swin_tiny_patch4_window7_224"}, img_size, "torchscript")
