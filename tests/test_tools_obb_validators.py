"""tools/bench.py obb-validators: an OBB model of ours written as ultralytics' trainer writes best.pt is read by
ultralytics as an OBB model (its validator picks the task from the file) and runs as ours does; a run whose
weights do not fit the named YAML is refused."""
import numpy as np
import pytest
import torch

from tests.models.yolo.peer_zoo import peer_yaml
from tests.peers import import_ultralytics
from tools.suites.obb_validators import write_as_ultralytics
from vision_attn.models.yolo import build_detector

ultralytics = import_ultralytics("ultralytics")
CLASSES = ["a", "b", "c"]


@pytest.fixture(scope="module")
def ours():
    torch.manual_seed(0)
    model = build_detector(peer_yaml("v8/yolov8-obb.yaml"), scale="n", num_classes=len(CLASSES)).eval()
    with torch.no_grad():  # batch-norm statistics away from the identity, so that every tensor matters
        for name, value in model.state_dict().items():
            if "running_var" in name:
                value.uniform_(0.5, 1.5)
            elif "running_mean" in name:
                value.uniform_(-0.1, 0.1)
    return model


def test_ultralytics_reads_our_weights_as_its_obb_model(ours, tmp_path):
    pt = write_as_ultralytics(ours, CLASSES, 64, "yolov8n-obb.yaml", tmp_path, "data.yaml")
    yolo = ultralytics.YOLO(str(pt))
    assert yolo.task == "obb" and yolo.model.names == dict(enumerate(CLASSES))
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    rounded = {k: v.half().float() if v.is_floating_point() else v for k, v in ours.state_dict().items()}
    ours_fp16 = build_detector(peer_yaml("v8/yolov8-obb.yaml"), scale="n", num_classes=len(CLASSES)).eval()
    ours_fp16.load_state_dict(rounded)  # the file holds fp16 weights, as ultralytics' trainer writes them
    with torch.no_grad():
        theirs = yolo.model.float().eval()(x)[0]
        np.testing.assert_allclose(theirs.numpy(), ours_fp16(x).numpy(), rtol=1e-4, atol=1e-3)


def test_weights_that_do_not_fit_the_yaml_are_refused(ours, tmp_path):
    with pytest.raises(SystemExit, match=r"do not fit ultralytics' yolo11n-obb.yaml .*--peer-yaml"):
        write_as_ultralytics(ours, CLASSES, 64, "yolo11n-obb.yaml", tmp_path, "data.yaml")
