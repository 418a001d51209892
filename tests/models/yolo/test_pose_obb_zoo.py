"""Every keypoint (-pose) and oriented-box (-obb) YAML of ultralytics 8.4.190 (read from the installed
test-only peer) at every scale it defines: the same parameter count, state-dict names and shapes as
ultralytics' ``PoseModel`` / ``OBBModel`` rows; the same eval outputs (boxes, class probabilities, decoded
keypoints or angles) on its weights, and for YOLO26's end-to-end heads the same training outputs of both
branches.

Shapes are compared on the ``meta`` device (ultralytics through its own ``parse_model``), outputs at
64 px (128 px for the P6 layout, whose largest stride is 64), scale n.
"""
import pytest
import torch
import yaml

from vision_attn.analysis import count_flops
from vision_attn.analysis.meta_shapes import meta_shapes
from vision_attn.errors import ConfigError
from vision_attn.models.yolo import build_detector, insert_attention_text, remap_state_dict
from vision_attn.models.yolo.obb import OBB, OBB26
from vision_attn.models.yolo.pose import Pose, Pose26

from .peer_zoo import (OBB_HEADS, POSE_HEADS, detection_pairs, import_ultralytics, peer_decoded, peer_dict,
                       peer_layers, peer_model, peer_yaml, ultralytics_tasks)

POSE_PAIRS = detection_pairs(POSE_HEADS)
OBB_PAIRS = detection_pairs(OBB_HEADS)
PAIRS = POSE_PAIRS + OBB_PAIRS
POSE_YAMLS = ["v8/yolov8-pose.yaml", "v8/yolov8-pose-p6.yaml", "11/yolo11-pose.yaml", "12/yolo12-pose.yaml",
              "26/yolo26-pose.yaml"]
OBB_YAMLS = ["v8/yolov8-obb.yaml", "11/yolo11-obb.yaml", "12/yolo12-obb.yaml", "26/yolo26-obb.yaml"]
torch_utils = import_ultralytics("ultralytics.utils.torch_utils")
PEER_CLASS = {"pose": "PoseModel", "obb": "OBBModel"}


def head_class(rel: str) -> type:
    if "-pose" in rel:
        return Pose26 if rel.startswith("26/") else Pose
    return OBB26 if rel.startswith("26/") else OBB


def test_the_peer_ships_45_pose_and_obb_pairs():
    assert sorted({rel for rel, _ in POSE_PAIRS}) == sorted(POSE_YAMLS)
    assert sorted({rel for rel, _ in OBB_PAIRS}) == sorted(OBB_YAMLS)
    assert len(PAIRS) == 45  # five scales each


@pytest.mark.parametrize("rel,scale", PAIRS, ids=[f"{r.split('/')[-1][:-5]}-{s}" for r, s in PAIRS])
def test_same_parameters_and_state_dict_as_ultralytics(rel, scale):
    with torch.device("meta"), meta_shapes():  # shapes by formula: no compute, no compiler stack
        ours = build_detector(peer_yaml(rel), scale=scale)
        theirs = peer_layers(rel, scale)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    assert list(ours.state_dict()) == list(theirs.state_dict())  # the same names, in the same order
    ours.load_state_dict(theirs.state_dict(), strict=True)  # and shapes (checked on meta too)
    head = ours.model[-1]
    assert type(head) is head_class(rel) and ours.task == ("pose" if "-pose" in rel else "obb")
    assert head.has_one2one == rel.startswith("26/") and len(ours.stride) == head.nl
    if isinstance(head, Pose):
        assert head.kpt_shape == (17, 3) and head.nk == 51
    else:
        assert head.ne == 1


OUTPUT_CASES = [(rel, "n", 128 if "p6" in rel else 64) for rel in POSE_YAMLS + OBB_YAMLS]


def ours_on_peer_weights(peer: torch.nn.Module, rel: str, scale: str | None) -> torch.nn.Module:
    head = peer.model[-1]
    with torch.device("meta"):  # no random initialisation or probe arithmetic: the weights come from the peer
        ours = build_detector(peer_yaml(rel), scale=scale, num_classes=head.nc,
                              kpt_shape=getattr(head, "kpt_shape", None))
    ours.to_empty(device="cpu").load_state_dict(peer.state_dict(), strict=True)
    ours.model[-1].stride.copy_(torch.tensor(ours.stride))  # the probe's strides (kept out of the state dict)
    return ours


@pytest.mark.parametrize("rel,scale,size", OUTPUT_CASES,
                         ids=[f"{r.split('/')[-1][:-5]}-{s}" for r, s, _ in OUTPUT_CASES])
def test_same_eval_outputs_on_ultralytics_weights(rel, scale, size):
    task = "pose" if "-pose" in rel else "obb"
    peer = peer_model(rel, scale, PEER_CLASS[task])
    ours = ours_on_peer_weights(peer, rel, scale).eval()
    x = torch.rand(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    head = ours.model[-1]
    with torch.no_grad():
        pred = ours(x)
        their_pred = peer_decoded(peer, x, "one2one" if head.has_one2one else None)
    n_anchors = sum((size // s) ** 2 for s in ours.stride)
    extra = head.nk if task == "pose" else head.ne
    assert pred.shape == (2, 4 + head.nc + extra, n_anchors)
    torch.testing.assert_close(pred, their_pred, rtol=1e-5, atol=1e-4)  # boxes, classes, keypoints / angle


def flat(feats: list[torch.Tensor], reg_max: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Our per-level maps -> ultralytics' (B, 4*reg_max, A) box logits and (B, nc, A) class logits."""
    b, no = feats[0].shape[:2]
    return torch.cat([f.view(b, no, -1) for f in feats], 2).split((4 * reg_max, no - 4 * reg_max), 1)


@pytest.mark.parametrize("rel", ["v8/yolov8-pose.yaml", "26/yolo26-pose.yaml", "v8/yolov8-obb.yaml",
                                 "26/yolo26-obb.yaml"])
def test_training_outputs_equal_ultralytics(rel):
    task = "pose" if "-pose" in rel else "obb"
    peer = peer_model(rel, "n", PEER_CLASS[task]).train()
    ours = ours_on_peer_weights(peer, rel, "n").train()
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    out, theirs = ours(x), peer(x)
    e2e = rel.startswith("26/")
    branches = ("one2many", "one2one") if e2e else (None,)
    extra = {"pose": ("kpts", "kpts_sigma") if e2e else ("kpts",), "obb": ("angle",)}[task]
    for branch in branches:
        got, want = (out[branch], theirs[branch]) if branch else (out, theirs)
        assert set(got) == {"feats", *extra}
        boxes, scores = flat(got["feats"], 1 if e2e else 16)
        torch.testing.assert_close(boxes, want["boxes"], rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(scores, want["scores"], rtol=1e-5, atol=1e-4)
        for key in extra:
            torch.testing.assert_close(got[key], want[key], rtol=1e-5, atol=1e-4)
    if e2e:  # the one-to-one branch trains only its own layers
        one2one = out["one2one"]
        loss = sum(f.sum() for f in one2one["feats"]) + sum(one2one[k].sum() for k in extra)
        loss.backward()
        assert all(p.grad is None for p in ours.model[0].parameters())
        assert all(p.grad is None for p in ours.model[-1].cv4.parameters())
        assert all(p.grad is not None for p in ours.model[-1].one2one_cv4.parameters())


def test_the_data_kpt_shape_overrides_the_yaml_as_in_ultralytics():
    with torch.device("meta"):
        ours = build_detector(peer_yaml("v8/yolov8-pose.yaml"), scale="n", kpt_shape=(4, 2))
    theirs = ultralytics_tasks.PoseModel(peer_dict("v8/yolov8-pose.yaml", "n"), data_kpt_shape=(4, 2), verbose=False)
    head = ours.model[-1]
    assert head.kpt_shape == (4, 2) and head.nk == 8
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}


@pytest.mark.parametrize("rel,args,message", [
    ("v8/yolov8-pose.yaml", ["nc", [17, 4]], r"kpt_shape \[17, 4\] must be \[keypoints, dims\]"),
    ("v8/yolov8-pose.yaml", [], r"takes \[nc, kpt_shape\]"),
    ("v8/yolov8-obb.yaml", ["nc", 0], r"ne=0 must be 1 to 8"),
    ("v8/yolov8-obb.yaml", ["nc", 1, 2], r"takes \[nc, ne\]"),
])
def test_a_bad_head_row_is_named(rel, args, message):
    data = yaml.safe_load(peer_yaml(rel).read_text())
    data["head"][-1][3] = args
    with pytest.raises(ConfigError, match=rf"row 22 field 'args': .*{message}"), torch.device("meta"):
        build_detector(data, scale="n")


def test_a_pose_yaml_without_kpt_shape_says_where_to_put_it():
    data = yaml.safe_load(peer_yaml("v8/yolov8-pose.yaml").read_text())
    del data["kpt_shape"]
    with pytest.raises(ConfigError, match=r"row 22 field 'args': Pose needs the keypoint shape; add 'kpt_shape"):
        build_detector(data, scale="n")
    data["kpt_shape"] = [17, 5]
    with pytest.raises(ConfigError, match=r"field 'kpt_shape': kpt_shape \[17, 5\] must be"):
        build_detector(data, scale="n")


@pytest.mark.parametrize("rel", ["v8/yolov8-pose.yaml", "v8/yolov8-obb.yaml"])
def test_cbam_inserted_with_identity_start_keeps_the_outputs(rel):
    """CBAM after the four backbone C2f rows of yolov8-pose / yolov8-obb (the neck and head re-indexed), the trained rows
    moved to their new indices: the same boxes, classes and keypoints / angles until training moves the
    new rows, which get gradients from the first step."""
    task = "pose" if "-pose" in rel else "obb"
    peer = peer_model(rel, "n", PEER_CLASS[task])
    base = ours_on_peer_weights(peer, rel, "n").eval()
    edit = insert_attention_text(peer_yaml(rel).read_text(), "CBAM", after="C2f", args=[{"zero_init": True}])
    assert edit.inserted == [3, 6, 9, 12] and edit.index_map[22] == 26
    model = build_detector(edit.text, scale="n", num_classes=peer.model[-1].nc)
    missing, unexpected = model.load_state_dict(remap_state_dict(base.state_dict(), edit.index_map), strict=False)
    assert not unexpected and {k.split(".")[1] for k in missing} == {str(i) for i in edit.inserted}
    assert model.inputs[-1] == (19, 22, 25) and type(model.model[-1]) is type(base.model[-1])
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x), base(x), rtol=0, atol=0)
    out = model.train()(x)
    extra = out["kpts" if task == "pose" else "angle"]
    (sum(f.sum() for f in out["feats"]) + extra.sum()).backward()
    assert all(any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.model[i].parameters())
               for i in edit.inserted)


FLOPS_CASES = ["v8/yolov8-pose.yaml", "26/yolo26-pose.yaml", "26/yolo26-obb.yaml"]


@pytest.mark.parametrize("rel", FLOPS_CASES, ids=[r.split("/")[-1][:-5] for r in FLOPS_CASES])
def test_flops_equal_ultralytics_fused_figure(rel):
    """Our count of the network that predicts (meta device, 640 px, scale n) against ultralytics' figure for
    its fused model: batch norm folded, an end-to-end head's one-to-many branch (and YOLO26's training-only
    keypoint scales and flow) dropped. (All nine YAMLs agree; three here keep the suite short.)"""
    with torch.device("meta"):
        ours = count_flops(build_detector(peer_yaml(rel), scale="n"), 640)
    peer = peer_model(rel, "n", PEER_CLASS["pose" if "-pose" in rel else "obb"])
    if hasattr(peer.model[-1], "one2one_cv2"):
        peer.end2end = True  # predict with the one-to-one branch, as ours does
    fused = torch_utils.get_flops(peer.fuse(verbose=False), 640)
    assert ours.macs * 2 / 1e9 == pytest.approx(fused, rel=1e-9)
    assert ours.by_module  # the count is attributed to rows
