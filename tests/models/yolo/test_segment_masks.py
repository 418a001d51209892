"""Instance masks from prototypes and coefficients equal ultralytics' ``process_mask`` (upsampled to the
input, cropped to the box) and, mapped back to the original image, its ``scale_masks``; detections of a
segmentation head keep their mask coefficients through NMS and the end-to-end top-k."""
import pytest
import torch

from vision_attn.models.yolo.masks import crop_to_boxes, instance_masks, mask_logits, masks_to_original
from vision_attn.models.yolo.postprocess import postprocess, topk_anchors, topk_pairs

from .peer_zoo import import_ultralytics

ops = import_ultralytics("ultralytics.utils.ops")


def random_case(n: int, size: tuple[int, int], seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h, w = size
    protos = torch.randn(32, h // 4, w // 4, generator=g)
    coeffs = torch.randn(n, 32, generator=g) * 0.5
    xy = torch.rand(n, 2, generator=g) * torch.tensor([w * 0.6, h * 0.6])
    wh = torch.rand(n, 2, generator=g) * torch.tensor([w * 0.5, h * 0.5]) + 2
    return protos, coeffs, torch.cat((xy, xy + wh), 1)


@pytest.mark.parametrize("size,seed", [((64, 64), 0), ((96, 128), 1), ((160, 96), 2)])
def test_instance_masks_equal_ultralytics_process_mask(size, seed):
    protos, coeffs, boxes = random_case(7, size, seed)
    ours = instance_masks(protos, coeffs, boxes, size)
    theirs = ops.process_mask(protos, coeffs, boxes, size, upsample=True)
    assert ours.dtype == torch.uint8 and ours.shape == (7, *size)
    assert torch.equal(ours, theirs)
    assert 0 < ours.sum() < ours.numel()  # a real case: masks neither empty nor full
    # nothing outside the boxes, and the logits are coefficients times prototypes
    assert torch.equal(crop_to_boxes(ours, boxes), ours)
    torch.testing.assert_close(mask_logits(protos, coeffs), torch.einsum("nc,chw->nhw", coeffs, protos))
    assert instance_masks(protos, coeffs[:0], boxes[:0], size).shape == (0, *size)


@pytest.mark.parametrize("orig,seed", [((50, 64), 3), ((64, 37), 4), ((120, 200), 5)])
def test_masks_to_original_equal_ultralytics_scale_masks(orig, seed):
    """A letterbox into 64 x 64 (scale min(64 / h, 64 / w), the rest padded evenly) and back."""
    h0, w0 = orig
    gain = min(64 / h0, 64 / w0)
    pad_w, pad_h = (64 - round(w0 * gain)) / 2, (64 - round(h0 * gain)) / 2
    protos, coeffs, boxes = random_case(5, (64, 64), seed)
    masks = instance_masks(protos, coeffs, boxes, (64, 64))
    ours = masks_to_original(masks, scale=gain, pad=(pad_w, pad_h), orig_size=orig)
    theirs = ops.scale_masks(masks[None].float(), orig, ratio_pad=((gain, gain), (pad_w, pad_h)))[0]
    assert ours.dtype == torch.uint8 and ours.shape == (5, h0, w0)
    assert torch.equal(ours, (theirs > 0.5).to(torch.uint8))
    assert ours.sum() > 0


def seg_output(nc: int = 3, nm: int = 4, a: int = 50, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    xy, wh = torch.rand(1, 2, a, generator=g) * 60, torch.rand(1, 2, a, generator=g) * 20 + 4
    return torch.cat((xy, wh, torch.rand(1, nc, a, generator=g), torch.randn(1, nm, a, generator=g)), 1)


def test_postprocess_keeps_each_detections_coefficients():
    pred = seg_output()
    plain = postprocess(pred[:, :7], conf=0.3)[0]  # the same boxes and classes without coefficients
    dets = postprocess(pred, conf=0.3, nm=4)[0]
    assert plain.coeffs is None and len(dets) == len(plain) > 0
    assert torch.equal(dets.boxes, plain.boxes) and torch.equal(dets.labels, plain.labels)
    rows = pred[0].T  # (A, 4 + nc + nm): find each detection's anchor by its (random, so unique) score
    for score, label, coeffs in zip(dets.scores, dets.labels, dets.coeffs):
        anchor = (rows[:, 4 + label] == score).nonzero()
        assert len(anchor) == 1 and torch.equal(coeffs, rows[anchor[0, 0], 7:])


def test_end_to_end_top_k_keeps_each_detections_coefficients():
    pred = seg_output(a=40)
    boxes, scores, labels = topk_pairs(pred[:, :7], 10)
    b2, s2, l2, anchor = topk_anchors(pred, 10, nm=4)
    assert torch.equal(boxes, b2) and torch.equal(scores, s2) and torch.equal(labels, l2)
    dets = postprocess(pred, conf=0.5, end2end=True, max_det=10, nm=4)[0]
    keep = scores[0] > 0.5
    assert len(dets) == int(keep.sum()) > 0
    assert torch.equal(dets.coeffs, pred[0, 7:, anchor[0][keep]].T)
