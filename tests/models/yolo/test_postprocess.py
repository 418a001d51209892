"""Post-processing: threshold, class-wise NMS, caps, multi-label, and the way back to original pixels."""
import pytest
import torch
from torchvision.ops import box_convert

from vision_attn.models.yolo.postprocess import postprocess, to_original


def _decoded(boxes_xyxy, probs):
    """(1, 4 + nc, A) from boxes (A, 4) xyxy and probabilities (A, nc)."""
    cxcywh = box_convert(torch.tensor(boxes_xyxy, dtype=torch.float32), "xyxy", "cxcywh")
    return torch.cat((cxcywh, torch.tensor(probs, dtype=torch.float32)), 1).T.unsqueeze(0)


def test_threshold_nms_per_class_and_sorting():
    boxes = [[0, 0, 10, 10], [1, 1, 10, 10], [0, 0, 10, 10], [50, 50, 60, 60], [20, 20, 30, 30]]
    probs = [[0.9, 0.0], [0.8, 0.0], [0.0, 0.7], [0.3, 0.0], [0.1, 0.2]]
    (det,) = postprocess(_decoded(boxes, probs), conf=0.25, iou=0.5)
    # box 1 overlaps box 0 of the same class (suppressed); box 2 has another class (kept); box 4 below conf
    assert det.scores.tolist() == pytest.approx([0.9, 0.7, 0.3])
    assert det.labels.tolist() == [0, 1, 0]
    assert det.boxes[2].tolist() == [50, 50, 60, 60]
    (agnostic,) = postprocess(_decoded(boxes, probs), conf=0.25, iou=0.5, agnostic=True)
    assert agnostic.scores.tolist() == pytest.approx([0.9, 0.3])
    (capped,) = postprocess(_decoded(boxes, probs), conf=0.25, iou=0.5, max_det=2)
    assert len(capped) == 2


def test_multi_label_keeps_a_box_once_per_class_above_the_threshold():
    dec = _decoded([[0, 0, 10, 10]], [[0.6, 0.4]])
    (single,) = postprocess(dec, conf=0.3)
    (multi,) = postprocess(dec, conf=0.3, multi_label=True)
    assert single.labels.tolist() == [0]
    assert sorted(multi.labels.tolist()) == [0, 1] and multi.scores.tolist() == pytest.approx([0.6, 0.4])


def test_batch_and_empty_images():
    dec = torch.cat([_decoded([[0, 0, 10, 10]], [[0.9]]), _decoded([[0, 0, 10, 10]], [[0.01]])])
    a, b = postprocess(dec, conf=0.25)
    assert len(a) == 1 and len(b) == 0 and b.boxes.shape == (0, 4)
    with pytest.raises(ValueError, match=r"\(B, 4 \+ nc, A\)"):
        postprocess(torch.zeros(2, 4))


def test_to_original_undoes_letterbox_scale_and_padding():
    # a 100x200 (h, w) image letterboxed to 160: scale 0.8, padded 40 px at the top
    boxes = torch.tensor([[8.0, 48.0, 88.0, 120.0], [-5.0, 30.0, 170.0, 130.0]])
    out = to_original(boxes, scale=0.8, pad=(0, 40), orig_size=(100, 200))
    assert out[0].tolist() == pytest.approx([10.0, 10.0, 110.0, 100.0])
    assert out[1].tolist() == pytest.approx([0.0, 0.0, 200.0, 100.0])  # clipped to the image
    assert to_original(boxes, scale=torch.tensor(0.8), pad=torch.tensor([0.0, 40.0]),
                       orig_size=(100, 200)).allclose(out)


@pytest.mark.parametrize("agnostic", [False, True])
def test_end_to_end_topk_matches_ultralytics_detect_postprocess(agnostic):
    from tests.peers import import_ultralytics

    head = import_ultralytics("ultralytics.nn.modules.head")
    from vision_attn.models.yolo.postprocess import topk_pairs

    g = torch.Generator().manual_seed(0)
    xy = torch.rand(2, 60, 2, generator=g) * 100
    xyxy = torch.cat((xy, xy + 5 + torch.rand(2, 60, 2, generator=g) * 40), -1)
    probs = torch.rand(2, 60, 3, generator=g)
    peer = head.Detect(nc=3, end2end=True, ch=(8,))
    peer.max_det, peer.agnostic_nms = 20, agnostic
    theirs = peer.postprocess(torch.cat((xyxy, probs), -1))  # (B, 20, 6): x1 y1 x2 y2 score class
    ours = torch.cat((box_convert(xyxy, "xyxy", "cxcywh"), probs), -1).transpose(1, 2)
    boxes, scores, labels = topk_pairs(ours, 20, agnostic)
    assert torch.equal(scores, theirs[..., 4]) and torch.equal(labels, theirs[..., 5].long())
    assert torch.allclose(boxes, theirs[..., :4], atol=1e-4)
    if not agnostic:  # among the top anchors, an anchor may come back with a second class
        assert any(len(set(a.tolist())) < 20 for a in (boxes * 1000).round().sum(-1))
    dets = postprocess(ours, conf=0.5, max_det=20, end2end=True, agnostic=agnostic)
    for det, s in zip(dets, scores):
        assert det.scores.tolist() == s[s > 0.5].tolist() and det.boxes.shape == (len(det), 4)
