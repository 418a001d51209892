"""FLOPs of the attention-bearing detectors at 640 px: the attention products are counted (a hand count
of them matches), and the total equals ultralytics' own figure for the network that predicts (its
model fused: batch norm folded, the unused branch of an end-to-end head dropped)."""
import pytest
import torch
import yaml

from vision_attn.analysis import count_flops
from vision_attn.models.yolo import build_detector

from .conftest import CONFIGS
from .peer_zoo import import_ultralytics, peer_yaml, ultralytics_tasks

torch_utils = import_ultralytics("ultralytics.utils.torch_utils")


def psa_macs(c: int, n: int) -> int:
    """One PSA attention over n positions of c channels: heads c/64, q kᵀ at key_dim 32, attn v at 64."""
    heads = max(c // 64, 1)
    head_dim = c // heads
    return heads * n * n * (head_dim // 2 + head_dim)


def area_macs(c: int, n: int, area: int) -> int:
    """One area attention over n positions of c channels in ``area`` strips: q kᵀ and attn v per strip."""
    return area * 2 * (n // area) ** 2 * c


# at 640 px, scale n: P4 is 40 x 40, P5 20 x 20
HAND_COUNT = {
    # A2C2f row 6: 2 repeats x 2 ABlocks, 64 channels, area 4 at P4; row 8: the same, 128 channels at P5
    "yolo12": 4 * area_macs(64, 1600, 4) + 4 * area_macs(128, 400, 1),
    # C2PSA row 10 and the C3k2 row 22 with attention: a PSA block of 128 channels at P5 each
    "yolo26": 2 * psa_macs(128, 400),
    # PSA row 10: 128 channels at P5
    "yolov10n": psa_macs(128, 400),
}
PATHS = {"yolo12": CONFIGS / "yolo12.yaml", "yolo26": CONFIGS / "yolo26.yaml", "yolov10n": peer_yaml("v10/yolov10n.yaml")}


def count(name: str):
    with torch.device("meta"):
        return count_flops(build_detector(PATHS[name], scale="n"), 640)


@pytest.mark.parametrize("name", list(HAND_COUNT))
def test_attention_products_are_counted(name):
    report = count(name)
    attention = sum(v for k, v in report.by_op.items() if "scaled_dot_product" in k or k.endswith("bmm"))
    assert attention == HAND_COUNT[name]
    assert HAND_COUNT["yolo12"] == 491_520_000  # 0.98 GFLOPs of 7.47


@pytest.mark.parametrize("name,gflops", [("yolo12", 7.4709632), ("yolo26", 5.4803072)])
def test_total_equals_ultralytics_fused_figure(name, gflops):
    data = yaml.safe_load(PATHS[name].read_text())
    data["scale"] = "n"
    peer = ultralytics_tasks.DetectionModel(data, verbose=False).eval()
    unfused = torch_utils.get_flops(peer, 640)
    if hasattr(peer.model[-1], "one2one_cv2"):
        peer.end2end = True  # predict with the one-to-one branch, as ours does
    fused = torch_utils.get_flops(peer.fuse(verbose=False), 640)
    ours = count(name).gflops
    assert ours == pytest.approx(fused, rel=1e-9) and ours == pytest.approx(gflops, rel=1e-9)
    # unfused, thop adds batch norm, activations and upsampling, and an end-to-end head runs both branches
    assert unfused > ours
