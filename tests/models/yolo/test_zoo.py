"""Every detection YAML of ultralytics 8.4.190 (read from the installed test-only peer) at every scale it
defines: the same parameter count, state-dict names and shapes (ultralytics' state dict loads with
``strict=True``); and, for one scale of each family, the same outputs on its weights.

The shape checks build both sides on the ``meta`` device (ultralytics through its own ``parse_model``,
which needs no probe forward), so the 100M-parameter variants cost no memory and no arithmetic.
"""
import pytest
import torch

from vision_attn.models.yolo import build_detector
from vision_attn.models.yolo.composite import CBFuse, CBLinear
from vision_attn.models.yolo.detect import Detect

from .peer_zoo import detection_pairs, import_ultralytics, peer_decoded, peer_layers, peer_model, peer_yaml

PAIRS = detection_pairs()


def test_the_peer_ships_84_detection_pairs():
    assert len(PAIRS) == 84  # heads Detect and v10Detect; the other heads are not detection YAMLs
    assert len({rel for rel, _ in PAIRS}) == 28


@pytest.mark.parametrize("rel,scale", PAIRS, ids=[f"{r.split('/')[-1][:-5]}-{s}" for r, s in PAIRS])
def test_same_parameters_and_state_dict_as_ultralytics(rel, scale):
    with torch.device("meta"):
        ours = build_detector(peer_yaml(rel), scale=scale)
        theirs = peer_layers(rel, scale)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    ours.load_state_dict(theirs.state_dict(), strict=True)  # the same names, and shapes (checked on meta too)
    assert isinstance(ours.model[-1], Detect) and len(ours.stride) == ours.model[-1].nl


# one scale of each family (the smallest); p6 layouts need a multiple of their stride 64
FAMILIES = [
    ("v3/yolov3-tiny.yaml", None, 160), ("v5/yolov5.yaml", "n", 160), ("v5/yolov5-p6.yaml", "n", 192),
    ("v6/yolov6.yaml", "n", 160), ("v8/yolov8.yaml", "n", 160), ("v8/yolov8-p2.yaml", "n", 160), ("v8/yolov8-p6.yaml", "n", 192),
    ("v8/yolov8-ghost.yaml", "n", 160), ("v8/yolov8-ghost-p2.yaml", "n", 160), ("v8/yolov8-ghost-p6.yaml", "n", 192),
    ("v9/yolov9t.yaml", None, 160), ("v9/yolov9c.yaml", None, 160), ("v10/yolov10n.yaml", "n", 160),
    ("11/yolo11.yaml", "n", 160), ("12/yolo12.yaml", "n", 160), ("26/yolo26.yaml", "n", 160),
    ("26/yolo26-p2.yaml", "n", 160), ("26/yolo26-p6.yaml", "n", 192),
]


@pytest.mark.parametrize("rel,scale,size", FAMILIES, ids=[r.split("/")[-1][:-5] for r, _, _ in FAMILIES])
def test_same_outputs_on_ultralytics_weights(rel, scale, size):
    peer = peer_model(rel, scale)
    with torch.device("meta"):  # no random initialisation or probe arithmetic: the weights come from the peer
        ours = build_detector(peer_yaml(rel), scale=scale)
    ours.to_empty(device="cpu").load_state_dict(peer.state_dict(), strict=True)
    head = ours.model[-1]
    head.stride.copy_(torch.tensor(ours.stride))  # the probe's strides (a buffer kept out of the state dict)
    ours.eval()
    x = torch.rand(1, 3, size, size)
    branch = "one2one" if head.has_one2one else None
    with torch.no_grad():
        torch.testing.assert_close(ours(x), peer_decoded(peer, x, branch), rtol=1e-5, atol=1e-4)


def test_composite_links_equal_ultralytics():
    # CBLinear / CBFuse appear only in yolov9e (58M parameters): compared here as modules
    blocks = import_ultralytics("ultralytics.nn.modules.block")
    theirs, ours = blocks.CBLinear(8, [4, 6], 3), CBLinear(8, [4, 6], 3)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    a, b = torch.randn(1, 8, 8, 8), torch.randn(1, 6, 4, 4)
    with torch.no_grad():
        links = ours(a)
        assert [t.shape[1] for t in links] == [4, 6]
        torch.testing.assert_close(links, theirs(a))
        torch.testing.assert_close(CBFuse([1])([links, b]), blocks.CBFuse([1])([theirs(a), b]))
