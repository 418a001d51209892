"""Every instance-segmentation YAML of ultralytics 8.4.190 (read from the installed test-only peer) at every
scale it defines: the same parameter count, state-dict names and shapes as ultralytics'
``SegmentationModel``; the same eval outputs (boxes, class probabilities, mask coefficients; prototypes)
on its weights, and for YOLO26's end-to-end head the same training outputs of both branches; the FLOPs
of the network that predicts equal to ultralytics' own figure.

Shapes are compared on the ``meta`` device (ultralytics through its own ``parse_model``), outputs at
64 px (128 px for the P6 layout, whose largest stride is 64).
"""
import pytest
import torch
import yaml

from vision_attn.analysis import count_flops
from vision_attn.errors import ConfigError
from vision_attn.models.yolo import build_detector
from vision_attn.models.yolo.conv import RepConv
from vision_attn.models.yolo.segment import Proto, Proto26, Segment, Segment26

from .peer_zoo import (SEGMENT_HEADS, detection_pairs, import_ultralytics, peer_decoded, peer_layers, peer_model,
                       peer_yaml)

torch_utils = import_ultralytics("ultralytics.utils.torch_utils")
PAIRS = detection_pairs(SEGMENT_HEADS)
YAMLS = ["v8/yolov8-seg.yaml", "v8/yolov8-seg-p6.yaml", "11/yolo11-seg.yaml", "12/yolo12-seg.yaml",
         "26/yolo26-seg.yaml", "v9/yolov9c-seg.yaml", "v9/yolov9e-seg.yaml"]


def test_the_peer_ships_27_segmentation_pairs():
    assert sorted({rel for rel, _ in PAIRS}) == sorted(YAMLS)  # the YOLOE -seg files have other heads
    assert len(PAIRS) == 27  # five scales each, yolov9c/e-seg one


@pytest.mark.parametrize("rel,scale", PAIRS, ids=[f"{r.split('/')[-1][:-5]}-{s}" for r, s in PAIRS])
def test_same_parameters_and_state_dict_as_ultralytics(rel, scale):
    with torch.device("meta"):
        ours = build_detector(peer_yaml(rel), scale=scale)
        theirs = peer_layers(rel, scale)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    assert list(ours.state_dict()) == list(theirs.state_dict())  # the same names, in the same order
    ours.load_state_dict(theirs.state_dict(), strict=True)  # and shapes (checked on meta too)
    head = ours.model[-1]
    assert isinstance(head, Segment26 if rel.startswith("26/") else Segment)
    assert isinstance(head.proto, Proto26 if rel.startswith("26/") else Proto)
    assert head.has_one2one == rel.startswith("26/") and len(ours.stride) == head.nl
    # the prototype width is scaled like a channel count (256 * width, capped)
    assert head.npr == theirs.model[-1].npr and head.nm == 32


# the first scale of each YAML, and one more of yolov8-seg
OUTPUT_CASES = [(rel, next(s for r, s in PAIRS if r == rel), 128 if "p6" in rel else 64) for rel in YAMLS]
OUTPUT_CASES.insert(1, ("v8/yolov8-seg.yaml", "s", 64))


def ours_on_peer_weights(peer: torch.nn.Module, rel: str, scale: str | None) -> torch.nn.Module:
    with torch.device("meta"):  # no random initialisation or probe arithmetic: the weights come from the peer
        ours = build_detector(peer_yaml(rel), scale=scale, num_classes=peer.model[-1].nc)
    ours.to_empty(device="cpu").load_state_dict(peer.state_dict(), strict=True)
    ours.model[-1].stride.copy_(torch.tensor(ours.stride))  # the probe's strides (kept out of the state dict)
    return ours


@pytest.mark.parametrize("rel,scale,size", OUTPUT_CASES,
                         ids=[f"{r.split('/')[-1][:-5]}-{s}" for r, s, _ in OUTPUT_CASES])
def test_same_eval_outputs_on_ultralytics_weights(rel, scale, size):
    peer = peer_model(rel, scale, "SegmentationModel")
    ours = ours_on_peer_weights(peer, rel, scale).eval()
    x = torch.rand(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    head = ours.model[-1]
    with torch.no_grad():
        pred, protos = ours(x)
        (their_pred, their_protos), _ = peer(x)
        if head.has_one2one:  # ultralytics top-k's its one-to-one branch inside the head: compare before that
            their_pred = peer_decoded(peer, x, "one2one")
    n_anchors = sum((size // s) ** 2 for s in ours.stride)
    assert pred.shape == (2, 4 + head.nc + head.nm, n_anchors)
    assert protos.shape == (2, head.nm, size // 4, size // 4)
    torch.testing.assert_close(pred, their_pred, rtol=1e-5, atol=1e-4)  # boxes, classes, coefficients
    torch.testing.assert_close(protos, their_protos, rtol=1e-5, atol=1e-4)


def flat(feats: list[torch.Tensor], reg_max: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Our per-level maps -> ultralytics' (B, 4*reg_max, A) box logits and (B, nc, A) class logits."""
    b, no = feats[0].shape[:2]
    return torch.cat([f.view(b, no, -1) for f in feats], 2).split((4 * reg_max, no - 4 * reg_max), 1)


def test_yolo26_seg_training_outputs_of_both_branches_equal_ultralytics():
    rel, scale = "26/yolo26-seg.yaml", "n"
    peer = peer_model(rel, scale, "SegmentationModel").train()
    ours = ours_on_peer_weights(peer, rel, scale).train()
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    out, theirs = ours(x), peer(x)
    assert set(out) == {"one2many", "one2one"}
    for branch in ("one2many", "one2one"):
        got, want = out[branch], theirs[branch]
        assert set(got) == {"feats", "coeffs", "protos", "semantic"}
        boxes, scores = flat(got["feats"], 1)
        torch.testing.assert_close(boxes, want["boxes"], rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(scores, want["scores"], rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(got["coeffs"], want["mask_coefficient"], rtol=1e-5, atol=1e-4)
        protos, semantic = want["proto"]
        torch.testing.assert_close(got["protos"], protos, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(got["semantic"], semantic, rtol=1e-5, atol=1e-4)
        assert got["semantic"].shape == (2, 80, 8, 8) and got["protos"].shape == (2, 32, 16, 16)
    # the one-to-one branch trains only its own layers: its inputs, protos and semantic logits are detached
    one2one = out["one2one"]
    assert not one2one["protos"].requires_grad and not one2one["semantic"].requires_grad
    loss = sum(f.sum() for f in one2one["feats"]) + one2one["coeffs"].sum()
    loss.backward()
    head = ours.model[-1]
    assert all(p.grad is None for p in head.proto.parameters())
    assert all(p.grad is None for p in head.cv4.parameters())
    assert all(p.grad is None for p in ours.model[0].parameters())
    assert all(p.grad is not None for p in head.one2one_cv4.parameters())


def test_plain_head_training_output_equals_ultralytics():
    rel, scale = "v8/yolov8-seg.yaml", "n"
    peer = peer_model(rel, scale, "SegmentationModel").train()
    ours = ours_on_peer_weights(peer, rel, scale).train()
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    got, want = ours(x), peer(x)
    assert set(got) == {"feats", "coeffs", "protos"}
    boxes, scores = flat(got["feats"], 16)
    torch.testing.assert_close(boxes, want["boxes"], rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(scores, want["scores"], rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got["coeffs"], want["mask_coefficient"], rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got["protos"], want["proto"], rtol=1e-5, atol=1e-4)


def repconv_branch_macs(model: torch.nn.Module, size: int) -> int:
    """MACs of the 1x1 branches of RepConv blocks (YOLOv9's ELAN), which ultralytics' ``fuse()`` folds into
    their 3x3 convolution (ours keeps both until a re-parameterisation), counted by hooks on a forward."""
    macs = []

    def hook(conv, inputs, output):
        macs.append(output[0].numel() * inputs[0].shape[1] // conv.groups)

    hooks = [m.conv2.conv.register_forward_hook(hook) for m in model.modules() if isinstance(m, RepConv)]
    try:
        with torch.no_grad():
            model.eval()(torch.zeros(1, 3, size, size, device=next(model.parameters()).device))
    finally:
        for h in hooks:
            h.remove()
    return sum(macs)


@pytest.mark.parametrize("rel,scale,size", OUTPUT_CASES,
                         ids=[f"{r.split('/')[-1][:-5]}-{s}" for r, s, _ in OUTPUT_CASES])
def test_flops_equal_ultralytics_fused_figure(rel, scale, size):
    """Our count of the network that predicts (meta device) against ultralytics' figure for its fused
    model: batch norm folded, an end-to-end head's one-to-many branch and YOLO26's semantic branch
    dropped, YOLOv9's RepConv 1x1 branches folded into their 3x3 convolutions."""
    with torch.device("meta"):
        model = build_detector(peer_yaml(rel), scale=scale)
        folded = repconv_branch_macs(model, 640)
        ours = count_flops(model, 640)
    peer = peer_model(rel, scale, "SegmentationModel")
    if hasattr(peer.model[-1], "one2one_cv2"):
        peer.end2end = True  # predict with the one-to-one branch, as ours does
    fused = torch_utils.get_flops(peer.fuse(verbose=False), 640)
    assert (folded > 0) == rel.startswith("v9/")  # only YOLOv9's ELAN blocks have RepConv
    assert (ours.macs - folded) * 2 / 1e9 == pytest.approx(fused, rel=1e-9)
    assert ours.by_module  # the count is attributed to rows


@pytest.mark.parametrize("args,message", [([], r"takes \[nc, nm, npr\]"), (["nc", 32, 256, 16], r"takes \[nc, nm"),
                                          (["nc", 0, 256], r"takes \[nc, nm"), (["nc", 512, 256], "too many")])
def test_a_bad_segment_row_is_named(args, message):
    data = yaml.safe_load(peer_yaml("v8/yolov8-seg.yaml").read_text())
    data["head"][-1][3] = args
    with pytest.raises(ConfigError, match=rf"row 22 field 'args': .*{message}"), torch.device("meta"):
        build_detector(data, scale="n")


def test_nm_and_npr_default_and_scale_like_ultralytics():
    data = yaml.safe_load(peer_yaml("v8/yolov8-seg.yaml").read_text())
    data["head"][-1][3] = ["nc"]
    with torch.device("meta"):
        head = build_detector(data, scale="s").model[-1]
    assert (head.nm, head.npr) == (32, 128)  # 256 prototype channels at width 0.5
