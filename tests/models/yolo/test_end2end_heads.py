"""End-to-end heads: YOLO26's ``end2end: True`` + ``reg_max: 1`` and YOLOv10's ``v10Detect``, against
ultralytics 8.4.190 on its own YAMLs and weights."""
import pytest
import torch

from vision_attn.errors import ConfigError
from vision_attn.models.yolo import build_detector
from vision_attn.models.yolo.detect import Detect, V10Detect

from .conftest import CONFIGS
from .peer_zoo import peer_decoded, peer_model, peer_yaml


@pytest.mark.parametrize("rel,scale", [("26/yolo26.yaml", "n"), ("v10/yolov10n.yaml", "n")])
def test_both_branches_equal_ultralytics(rel, scale):
    peer = peer_model(rel, scale)
    ours = build_detector(peer_yaml(rel), scale=scale).eval()
    ours.load_state_dict(peer.state_dict(), strict=True)
    head = ours.model[-1]
    assert head.has_one2one and head.end2end  # NMS-free prediction by default
    x = torch.rand(1, 3, 160, 160)
    with torch.no_grad():
        one2one = ours(x)
        head.end2end = False
        one2many = ours(x)
    assert one2one.shape == (1, 84, 20 * 20 + 10 * 10 + 5 * 5)
    torch.testing.assert_close(one2one, peer_decoded(peer, x, "one2one"), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(one2many, peer_decoded(peer, x, "one2many"), rtol=1e-5, atol=1e-4)


def test_yolo26_head_has_no_dfl_and_copies_its_branches():
    with torch.device("meta"):
        model = build_detector(peer_yaml("26/yolo26.yaml"), scale="n")
    head = model.model[-1]
    assert type(head) is Detect and head.reg_max == 1 and isinstance(head.dfl, torch.nn.Identity)
    assert head.cv2[0][-1].out_channels == 4  # the four distances, no bins
    names = {k.split(".")[0] for k, _ in head.named_parameters()}
    assert names == {"cv2", "cv3", "one2one_cv2", "one2one_cv3"}
    assert [p.shape for p in head.cv2.parameters()] == [p.shape for p in head.one2one_cv2.parameters()]


def test_v10_head_is_end_to_end_with_dfl():
    with torch.device("meta"):
        head = build_detector(peer_yaml("v10/yolov10s.yaml")).model[-1]
    assert type(head) is V10Detect and head.reg_max == 16 and head.has_one2one
    assert head.cv2[0][-1].out_channels == 64


def test_training_returns_both_branches_one2one_on_detached_features():
    model = build_detector(peer_yaml("26/yolo26.yaml"), scale="n", num_classes=3).train()
    out = model(torch.rand(2, 3, 64, 64))
    assert set(out) == {"one2many", "one2one"}
    for maps in out.values():
        assert [tuple(m.shape) for m in maps] == [(2, 4 + 3, 8, 8), (2, 7, 4, 4), (2, 7, 2, 2)]
    sum(m.sum() for m in out["one2one"]).backward()
    head = model.model[-1]
    assert all(p.grad is not None for p in head.one2one_cv2.parameters())
    assert all(p.grad is None for p in model.model[0].parameters())  # the backbone is not trained by it
    assert all(p.grad is None for p in head.cv2.parameters())


def test_plain_head_training_output_is_unchanged():
    model = build_detector(CONFIGS / "yolov8.yaml", scale="n").train()
    assert isinstance(model(torch.rand(1, 3, 64, 64)), list)
    assert not model.model[-1].has_one2one


def test_end2end_on_a_head_without_one2one_branch_is_an_error():
    with torch.device("meta"):
        head = build_detector(CONFIGS / "yolov8.yaml", scale="n").model[-1]
    with pytest.raises(ConfigError, match="no one-to-one branch.*end2end: True"):
        head.end2end = True


def test_end2end_yaml_without_head_is_an_error():
    text = "end2end: True\nbackbone:\n  - [-1, 1, Conv, [16, 3, 2]]\nhead:\n  - [-1, 1, Conv, [16, 3, 2]]\n"
    with pytest.raises(ConfigError, match="field 'end2end': true, but no row is a detection head"):
        build_detector(text)


@pytest.mark.parametrize("key,value,pattern", [("end2end", "maybe", "field 'end2end': 'maybe' must be true or false"),
                                               ("reg_max", 0, "field 'reg_max': 0 must be")])
def test_bad_head_keys(key, value, pattern):
    text = (CONFIGS / "yolov8.yaml").read_text() + f"{key}: {value}\n"
    with pytest.raises(ConfigError, match=pattern):
        build_detector(text, scale="n")


def test_v10detect_takes_nc_only():
    text = peer_yaml("v10/yolov10n.yaml").read_text().replace("v10Detect, [nc]", "v10Detect, [nc, 8]")
    with pytest.raises(ConfigError, match=r"row 23 field 'args': v10Detect takes \[nc\] \(its reg_max is 16\)"):
        build_detector(text)


@pytest.mark.parametrize("rel", ["26/yolo26.yaml", "v10/yolov10n.yaml"])
def test_negative_raw_distances_decode_to_valid_boxes(rel):
    """Early in training an end-to-end head's raw box outputs can be negative (YOLO26 has no DFL to keep
    its distances positive): decoded, after the top-k and after the letterbox is undone, every box
    still has x1 <= x2 and y1 <= y2 and lies inside the image."""
    from vision_attn.models.yolo.postprocess import postprocess, to_original

    torch.manual_seed(0)
    model = build_detector(peer_yaml(rel), scale="n", num_classes=3).eval()
    head = model.model[-1]
    raw = []
    with torch.no_grad():
        for branch in (head.cv2, head.one2one_cv2):
            for level in branch:
                level[-1].weight.mul_(10)
                level[-1].bias.fill_(-20.0)  # raw distances (or DFL logits) far below zero
                level[-1].register_forward_hook(lambda m, args, out: raw.append(out))
    x = torch.rand(2, 3, 64, 64)
    for end2end in (True, False):
        head.end2end, raw[:] = end2end, []
        with torch.no_grad():
            out = model(x)
        if head.reg_max == 1:  # the case at hand: most raw distances are negative
            assert (torch.cat([r.flatten() for r in raw]) < 0).float().mean() > 0.9
        assert (out[:, 2:4] >= 0).all()  # widths and heights
        for det in postprocess(out, conf=0.0, end2end=end2end):
            boxes = to_original(det.boxes, scale=0.5, pad=(0, 0), orig_size=(128, 128))
            assert len(boxes) and (boxes[:, 2] >= boxes[:, 0]).all() and (boxes[:, 3] >= boxes[:, 1]).all()
            assert boxes.min() >= 0 and boxes.max() <= 128
