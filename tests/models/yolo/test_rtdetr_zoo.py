"""ultralytics 8.4.190's RT-DETR YAMLs (read from the installed test-only peer) built by our builder: the
same parameter count, state-dict names and shapes as ultralytics' ``RTDETRDetectionModel`` at every scale;
the same eval outputs (every query's box and class probabilities) on its weights; the same training
outputs (all decoder layers, the encoder's selection, the denoising queries and their dn_meta) given the
same seed; AIFI and a small decoder on maps wider than tall; and the rows' refusals.

Shapes are compared on the ``meta`` device, outputs at 128 px. The peer's weights are its own
initialisation plus noise (so zero-initialised heads matter too), its batch-norm statistics those of a
batch (so the maps keep their spatial contrast through 50 layers and the encoder's top-k selection is
not a choice among near-equal scores).
"""
import contextlib
import copy
import io

import pytest
import torch
import yaml

from vision_attn.errors import ConfigError, DataError
from vision_attn.models.yolo import build_detector
from vision_attn.models.yolo.denoising import denoising_queries
from vision_attn.models.yolo.rtdetr import AIFI
from vision_attn.models.yolo.rtdetr_decoder import RTDETRDecoder

from .peer_zoo import import_ultralytics, peer_dict, peer_yaml, ultralytics_tasks

cdn = import_ultralytics("ultralytics.models.utils.ops")
transformer = import_ultralytics("ultralytics.nn.modules.transformer")
peer_heads = import_ultralytics("ultralytics.nn.modules.head")

YAMLS = ("rt-detr/rtdetr-l.yaml", "rt-detr/rtdetr-x.yaml", "rt-detr/rtdetr-resnet50.yaml",
         "rt-detr/rtdetr-resnet101.yaml", "v8/yolov8-rtdetr.yaml")
PAIRS = [(rel, s) for rel in YAMLS for s in yaml.safe_load(peer_yaml(rel).read_text())["scales"]]
SHIPPED = {("rt-detr/rtdetr-l.yaml", "l"): 32_970_476, ("rt-detr/rtdetr-x.yaml", "x"): 67_467_852,
           ("rt-detr/rtdetr-resnet50.yaml", "l"): 42_925_132, ("rt-detr/rtdetr-resnet101.yaml", "l"): 61_917_260,
           ("v8/yolov8-rtdetr.yaml", "n"): 9_643_868}
SIZE = 128


def peer_rtdetr(rel: str, scale: str) -> torch.nn.Module:
    """The peer's RTDETRDetectionModel in eval mode: its initialisation plus N(0, 0.02) noise, batch-norm
    statistics of one batch."""
    with contextlib.redirect_stdout(io.StringIO()):
        peer = ultralytics_tasks.RTDETRDetectionModel(peer_dict(rel, scale), verbose=False)
    norms = [m for m in peer.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    with torch.no_grad():
        for p in peer.parameters():
            p.add_(torch.randn_like(p) * 0.02)
        for m in norms:
            m.momentum = 1.0
        peer.train()(torch.rand(2, 3, 64, 64))  # running statistics := this batch's
    for m in norms:
        m.momentum = 0.03
    return peer.eval()


def ours_from(peer: torch.nn.Module, rel: str, scale: str) -> torch.nn.Module:
    with torch.device("meta"):
        ours = build_detector(peer_yaml(rel), scale=scale)
    ours.to_empty(device="cpu").load_state_dict(peer.state_dict(), strict=True)
    return ours.eval()


def assert_same_queries(mine: torch.Tensor, theirs: torch.Tensor) -> None:
    """(B, Q, C) rows equal up to the order of the queries: the decoder treats its queries as a set (self-
    attention is permutation-equivariant), and the encoder's top-k may order near-equal scores either way."""
    distance = torch.cdist(mine, theirs, p=float("inf"))  # (B, Q, Q)
    match = distance.argmin(-1)  # (B, Q)
    assert all(len(set(m.tolist())) == mine.shape[1] for m in match)  # a permutation
    assert (match == torch.arange(mine.shape[1])).float().mean() > 0.9  # mostly the same order
    torch.testing.assert_close(mine, theirs.gather(1, match[..., None].expand_as(theirs)), rtol=1e-4, atol=1e-4)


def test_the_peer_ships_these_rtdetr_yamls():
    shipped = {p.relative_to(peer_yaml("")).as_posix() for p in peer_yaml("").rglob("*.yaml")
               if (yaml.safe_load(p.read_text()).get("head") or [[0, 0, ""]])[-1][2] == "RTDETRDecoder"}
    assert shipped == set(YAMLS) and len(PAIRS) == 9


@pytest.mark.parametrize("rel,scale", PAIRS, ids=[f"{r.split('/')[-1][:-5]}-{s}" for r, s in PAIRS])
def test_same_parameters_and_state_dict_as_ultralytics(rel, scale):
    with torch.device("meta"), contextlib.redirect_stdout(io.StringIO()):
        ours = build_detector(peer_yaml(rel), scale=scale)
        theirs = ultralytics_tasks.RTDETRDetectionModel(peer_dict(rel, scale), verbose=False)
    params = sum(p.numel() for p in ours.parameters())
    assert params == sum(p.numel() for p in theirs.parameters()) == SHIPPED.get((rel, scale), params)
    assert list(ours.state_dict()) == list(theirs.state_dict())  # the same names, in the same order
    ours.load_state_dict(theirs.state_dict(), strict=True)  # and shapes (checked on meta)
    assert ours.task == "rtdetr" and isinstance(ours.model[-1], RTDETRDecoder)
    assert ours.stride == [8.0, 16.0, 32.0]  # the levels' strides; ultralytics keeps only the largest, 32


@pytest.mark.parametrize("rel,scale", [("rt-detr/rtdetr-l.yaml", "l"), ("rt-detr/rtdetr-resnet50.yaml", "l")],
                         ids=["rtdetr-l", "rtdetr-resnet50"])
def test_same_eval_outputs_on_ultralytics_weights(rel, scale):
    peer = peer_rtdetr(rel, scale)
    _check_eval(peer, ours_from(peer, rel, scale))


@pytest.fixture(scope="module")
def v8n():
    """yolov8-rtdetr at n: the peer and ours on its weights (tests copy them before training)."""
    torch.manual_seed(0)
    peer = peer_rtdetr("v8/yolov8-rtdetr.yaml", "n")
    return peer, ours_from(peer, "v8/yolov8-rtdetr.yaml", "n")


def test_same_eval_outputs_yolov8_rtdetr_n(v8n):
    _check_eval(*v8n)


def _check_eval(peer: torch.nn.Module, ours: torch.nn.Module) -> None:
    x = torch.rand(2, 3, SIZE, SIZE)
    with torch.no_grad():
        top, (boxes, logits, *_) = peer(x)  # its top-k detections, and the raw (1, B, Q, 4) / (1, B, Q, nc)
        mine = ours(x)
    assert mine.shape == (2, 4 + 80, 300)  # a Detect head's layout: boxes in input pixels, then probabilities
    mine = mine.transpose(1, 2)
    assert_same_queries(mine, torch.cat([boxes[0] * SIZE, logits[0].sigmoid()], -1))
    assert mine[..., :4].std() > 0.1 * SIZE and mine[..., 4:].std() > 1e-3  # the boxes and scores vary


def test_same_training_outputs_given_the_same_denoising_seed(v8n):
    peer, ours = (copy.deepcopy(m).train() for m in v8n)
    x = torch.rand(2, 3, SIZE, SIZE)
    targets = {"cls": torch.tensor([3, 7, 1]), "bboxes": torch.tensor([[0.3, 0.4, 0.2, 0.3], [0.6, 0.5, 0.3, 0.2],
                                                                         [0.5, 0.5, 0.4, 0.4]]),
               "batch_idx": torch.tensor([0, 0, 1]), "gt_groups": [2, 1]}
    torch.manual_seed(3)
    theirs = peer.predict(x, batch=targets)
    maps = ours.forward_rows(x, len(ours.model) - 1)
    mine = ours.model[-1]([maps[j] for j in ours.inputs[-1]], targets, generator=torch.Generator().manual_seed(3))
    dec_boxes, dec_scores, enc_boxes, enc_scores, meta = mine
    num_dn = 2 * 2 * (100 // 2)  # positive + negative copy, 50 groups of the most boxes of an image (2)
    assert dec_boxes.shape == (6, 2, num_dn + 300, 4) and dec_scores.shape == (6, 2, num_dn + 300, 80)
    assert enc_boxes.shape == (2, 300, 4) and enc_scores.shape == (2, 300, 80)
    assert meta["dn_num_group"] == theirs[4]["dn_num_group"] == 50 and meta["dn_num_split"] == [num_dn, 300]
    for key in ("dn_pos_idx", "dn_gt_idx"):
        assert all(torch.equal(a, b) for a, b in zip(meta[key], theirs[4][key], strict=True))
    # the denoising queries in their fixed places, then the matching queries as a set, every layer at once
    per_query = [torch.cat([b, s], -1).permute(1, 2, 0, 3).flatten(2) for b, s in ((dec_boxes, dec_scores),
                                                                                      (theirs[0], theirs[1]))]
    with torch.no_grad():
        torch.testing.assert_close(per_query[0][:, :num_dn], per_query[1][:, :num_dn], rtol=1e-4, atol=1e-4)
        assert_same_queries(per_query[0][:, num_dn:], per_query[1][:, num_dn:])
        assert_same_queries(torch.cat([enc_boxes, enc_scores], -1), torch.cat([theirs[2], theirs[3]], -1))
    dec_boxes.sum().backward()  # gradients reach the denoising embedding and the backbone
    assert ours.model[-1].denoising_class_embed.weight.grad.abs().sum() > 0
    assert ours.model[0].conv.weight.grad is not None


def test_denoising_queries_equal_ultralytics_cdn_group():
    """More boxes in one image than the denoising budget: a random subset, drawn in ultralytics' order."""
    groups = [120, 0, 3]
    n = sum(groups)
    batch = {"cls": torch.randint(0, 10, (n,)), "bboxes": torch.rand(n, 4) * 0.5 + 0.2,
             "batch_idx": torch.repeat_interleave(torch.arange(3), torch.tensor(groups)), "gt_groups": groups}
    embed = torch.randn(10, 16)
    torch.manual_seed(5)
    their_embed, their_boxes, their_mask, their_meta = cdn.get_cdn_group(batch, 10, 30, embed, 100, 0.5, 1.0, True)
    mine = denoising_queries(batch, 10, 30, embed, 100, generator=torch.Generator().manual_seed(5))
    assert torch.equal(mine.embed, their_embed) and torch.equal(mine.boxes, their_boxes)
    assert torch.equal(mine.mask, their_mask) and mine.mask.shape == (200 + 30, 200 + 30)
    assert all(torch.equal(a, b) for a, b in zip(mine.meta["dn_gt_idx"], their_meta["dn_gt_idx"], strict=True))
    assert denoising_queries({**batch, "gt_groups": [0, 0, 0]}, 10, 30, embed) is None
    with pytest.raises(DataError, match="not ordered by image"):
        denoising_queries({**batch, "batch_idx": batch["batch_idx"].flip(0)}, 10, 30, embed)


RTDETR_L = peer_yaml("rt-detr/rtdetr-l.yaml").read_text()
DECODER_ROW = "[[21, 24, 27], 1, RTDETRDecoder, [nc]]"


def build(text: str) -> torch.nn.Module:
    with torch.device("meta"):
        return build_detector(text)


@pytest.mark.parametrize("new,pattern", [
    ("[[21, 24, 27], 1, RTDETRDecoder, [nc, 256, 0]]", r"row 28 field 'args': RTDETRDecoder's query count nq=0"),
    ("[[21, 24, 27], 1, RTDETRDecoder, [nc, 256, -5]]", r"row 28 field 'args': RTDETRDecoder's query count nq=-5"),
    ("[[21, 24, 27], 2, RTDETRDecoder, [nc]]", r"row 28 field 'repeats': a RTDETRDecoder row is built once"),
    ("[[21, 24, 27], 1, RTDETRDecoder, [nc, 256, 300, 4, 7]]", r"row 28 \(RTDETRDecoder\): .*256 does not split into 7"),
    ("[[21, 24, 27], 1, RTDETRDecoder, [nc]]\n  - [-1, 1, Conv, [8]]", r"row 28 \(RTDETRDecoder\): .* the last row"),
])
def test_bad_decoder_rows(new, pattern):
    with pytest.raises(ConfigError, match=pattern):
        build(RTDETR_L.replace(DECODER_ROW, new))


@pytest.mark.parametrize("old,new,pattern", [
    ("[-1, 6, HGBlock, [48, 128, 3]]", "[-1, 6, HGBlock, [48]]", r"row 1 field 'args': HGBlock takes \[mid channels"),
    ("[-1, 1, AIFI, [1024, 8]]", "[-1, 1, AIFI, [1024, 7]]", r"row 11 \(AIFI\): 256 channels do not split into 7"),
])
def test_bad_rtdetr_rows(old, new, pattern):
    assert old in RTDETR_L
    with pytest.raises(ConfigError, match=pattern):
        build(RTDETR_L.replace(old, new))


def test_a_decoder_of_two_levels_builds_as_ultralytics_and_refuses_three_maps():
    text = RTDETR_L.replace(DECODER_ROW, "[[21, 24], 1, RTDETRDecoder, [nc]]")
    data = {**yaml.safe_load(text), "scale": "l"}
    with torch.device("meta"), contextlib.redirect_stdout(io.StringIO()):
        ours = build_detector(text)
        theirs = ultralytics_tasks.RTDETRDetectionModel(data, verbose=False)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict(), strict=True)
    head = ours.model[-1]
    assert head.nl == 2 and ours.stride == [8.0, 16.0]
    maps = [torch.zeros(1, 256, s, s, device="meta") for s in (16, 8, 4)]
    with pytest.raises(DataError, match="RTDETRDecoder was built for 2 feature levels .* but got 3 maps"):
        head.eval()(maps)


def test_rtdetr_rows_under_a_detect_head_build_as_ultralytics():
    """ultralytics builds an HGNet backbone with AIFI and RepC3 under a YOLO Detect head too: so do we."""
    text = RTDETR_L.replace(DECODER_ROW, "[[21, 24, 27], 1, Detect, [nc]]")
    with torch.device("meta"), contextlib.redirect_stdout(io.StringIO()):
        ours = build_detector(text)
        layers, _ = ultralytics_tasks.parse_model({**yaml.safe_load(text), "scale": "l"}, ch=3, verbose=False)
    theirs = torch.nn.ModuleDict({"model": layers})  # its parser's rows (its DetectionModel's stride probe needs data)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert ours.task == "detect" and ours.stride == [8.0, 16.0, 32.0]



@pytest.mark.parametrize("normalize_before", [False, True], ids=["post-norm", "pre-norm"])
def test_aifi_equals_ultralytics_on_a_wide_map(normalize_before):
    theirs = transformer.AIFI(32, 64, 4, normalize_before=normalize_before).eval()
    ours = AIFI(32, 64, 4, normalize_before=normalize_before).eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 32, 3, 5)  # H != W: the positions' rows and columns are not interchangeable
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-5)


def test_small_decoder_equals_ultralytics_on_wide_maps():
    """Two levels of 6 x 10 and 3 x 5 (anchors off the square), 2 layers, learnt queries, eval and training."""
    kwargs = dict(nc=5, ch=(16, 32), hd=32, nq=20, ndp=2, nh=4, ndl=2, d_ffn=64, learnt_init_query=True)
    theirs = peer_heads.RTDETRDecoder(**kwargs)
    for m in theirs.modules():  # the batch-norm settings its RTDETRDetectionModel gives every model (ours has them)
        if isinstance(m, torch.nn.BatchNorm2d):
            m.eps, m.momentum = 1e-3, 0.03
    ours = RTDETRDecoder(**kwargs)
    with torch.no_grad():
        for p in theirs.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    maps = [torch.randn(2, 16, 6, 10), torch.randn(2, 32, 3, 5)]
    with torch.no_grad():
        _, (boxes, logits, *_) = theirs.eval()(maps)
        assert_same_queries(ours.eval()(maps), torch.cat([boxes[0], logits[0].sigmoid()], -1))
    targets = {"cls": torch.tensor([1, 4]), "bboxes": torch.tensor([[0.3, 0.4, 0.2, 0.3], [0.6, 0.5, 0.3, 0.2]]),
               "batch_idx": torch.tensor([0, 1]), "gt_groups": [1, 1]}
    torch.manual_seed(1)
    expected = theirs.train()(maps, targets)
    got = ours.train()(maps, targets, generator=torch.Generator().manual_seed(1))
    for mine, their in zip(got[:4], expected[:4]):
        torch.testing.assert_close(mine, their, rtol=1e-4, atol=1e-4)
    assert got[4]["dn_num_split"] == expected[4]["dn_num_split"] == [2 * 100, 20]
