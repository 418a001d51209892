"""Rotated-box geometry: ProbIoU equal to ultralytics' ``probiou`` / ``batch_probiou``, one form per
rectangle, distances to a rotated box's sides inverting the head's decoding, and rotated NMS."""
import math

import torch

from tests.peers import import_ultralytics
from vision_attn.evaluation import rotated_iou
from vision_attn.losses import pairwise_probiou, probiou, rotated_nms, rotated_to_dist
from vision_attn.models.yolo.rotated import regularize
from vision_attn.models.yolo.obb import rotated_centres

ul_metrics = import_ultralytics("ultralytics.utils.metrics")
ul_nms = import_ultralytics("ultralytics.utils.nms")
ul_ops = import_ultralytics("ultralytics.utils.ops")


def random_boxes(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    centre = torch.rand(n, 2, generator=g) * 40
    size = torch.rand(n, 2, generator=g) * 30 + 1
    angle = (torch.rand(n, 1, generator=g) - 0.5) * 2 * math.pi
    return torch.cat((centre, size, angle), 1).double()


def test_probiou_equals_ultralytics():
    a, b = random_boxes(20, 2).float(), random_boxes(20, 3).float()
    torch.testing.assert_close(probiou(a, b), ul_metrics.probiou(a, b).squeeze(-1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(probiou(a, b, floor=0.01), ul_metrics.probiou(a, b, floor=0.01).squeeze(-1))
    torch.testing.assert_close(pairwise_probiou(a, b), ul_metrics.batch_probiou(a, b), rtol=1e-6, atol=1e-6)


def test_regularize_keeps_the_rectangle_and_equals_ultralytics():
    boxes = random_boxes(30, 5).float()
    regular = regularize(boxes)
    assert ((regular[:, 4] >= 0) & (regular[:, 4] < math.pi / 2)).all()
    torch.testing.assert_close(regular, ul_ops.regularize_rboxes(boxes))
    same = torch.from_numpy(rotated_iou(boxes.numpy(), regular.numpy())).diagonal()  # the exact polygon IoU
    torch.testing.assert_close(same, torch.ones(30, dtype=torch.float64), rtol=0, atol=1e-5)


def test_distances_invert_the_head_decoding():
    boxes = random_boxes(10, 4).float()
    points = boxes[:, :2] + torch.rand(10, 2) * 2 - 1  # points near the centres, inside the boxes
    dist = rotated_to_dist(boxes, points)
    back = rotated_centres(dist.T.unsqueeze(0), boxes[:, 4:].T.unsqueeze(0), points.T.unsqueeze(0))[0].T
    torch.testing.assert_close(back, boxes[:, :4], rtol=1e-5, atol=1e-4)
    assert (rotated_to_dist(boxes, points, 8) <= 7.99).all()


def test_rotated_nms_keeps_the_best_of_each_overlapping_group():
    boxes = torch.tensor([[10.0, 10, 20, 6, 0.5], [10.5, 10, 20, 6, 0.52], [40.0, 40, 10, 10, 0.0],
                          [10.0, 10, 20, 6, 0.5 + math.pi / 2], [41.0, 40, 10, 10, 0.05]])
    scores = torch.tensor([0.6, 0.9, 0.5, 0.8, 0.7])
    keep = rotated_nms(boxes, scores, 0.5, method="greedy")
    assert keep.tolist() == [1, 3, 4]  # 0 overlaps 1; 2 overlaps 4; 3 crosses 1 and stays
    iou = pairwise_probiou(boxes, boxes)
    assert iou[1, 3] < 0.5 and iou[0, 1] > 0.5 and iou[2, 4] > 0.5
    assert rotated_nms(boxes, scores, 0.5).tolist() == keep.tolist()  # Fast-NMS: the same here
    # ultralytics' own rotated NMS (its Fast-NMS on ProbIoU) keeps the same boxes
    theirs = ul_nms.TorchNMS.fast_nms(boxes, scores, 0.5, iou_func=ul_metrics.batch_probiou)
    assert theirs.tolist() == keep.tolist()
    assert rotated_nms(boxes[:0], scores[:0], 0.5).numel() == 0
    # a chain: 0 suppresses 1, which overlaps 2 as much; greedy keeps 2 (its suppressor is gone), Fast-NMS not
    chain = torch.tensor([[0.0, 0, 10, 10, 0], [5.0, 0, 10, 10, 0], [10.0, 0, 10, 10, 0]])
    chain_scores = torch.tensor([0.9, 0.8, 0.7])
    assert rotated_nms(chain, chain_scores, 0.3, method="greedy").tolist() == [0, 2]
    assert rotated_nms(chain, chain_scores, 0.3).tolist() == [0]
    assert ul_nms.TorchNMS.fast_nms(chain, chain_scores, 0.3, iou_func=ul_metrics.batch_probiou).tolist() == [0]
