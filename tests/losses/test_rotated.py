"""Rotated-box geometry: the exact polygon IoU against an independent reference (Sutherland-Hodgman
clipping in numpy, float64) within 1e-5, ProbIoU equal to ultralytics' ``probiou`` / ``batch_probiou``,
distances to a rotated box's sides inverting the head's decoding, and rotated NMS."""
import math

import numpy as np
import pytest
import torch

from tests.peers import import_ultralytics
from vision_attn.losses import box_corners, pairwise_probiou, probiou, rotated_iou, rotated_nms, rotated_to_dist
from vision_attn.models.yolo.rotated import regularize
from vision_attn.models.yolo.obb import rotated_centres

ul_metrics = import_ultralytics("ultralytics.utils.metrics")
ul_nms = import_ultralytics("ultralytics.utils.nms")
ul_ops = import_ultralytics("ultralytics.utils.ops")


def cross(u: np.ndarray, v: np.ndarray) -> float:
    return float(u[0] * v[1] - u[1] * v[0])


def clip(subject: list, clipper: np.ndarray) -> list:
    """Sutherland-Hodgman: the part of polygon ``subject`` inside the convex, counter-clockwise ``clipper``."""
    out = subject
    for i in range(len(clipper)):
        a, b = clipper[i], clipper[(i + 1) % len(clipper)]
        inp, out = out, []
        if not inp:
            break
        side = [cross(b - a, p - a) for p in inp]
        for j, p in enumerate(inp):
            q, sq, sp = inp[j - 1], side[j - 1], side[j]
            if sp >= 0:
                if sq < 0:
                    out.append(q + (p - q) * (sq / (sq - sp)))
                out.append(p)
            elif sq >= 0:
                out.append(q + (p - q) * (sq / (sq - sp)))
    return out


def area(poly: list) -> float:
    if len(poly) < 3:
        return 0.0
    p = np.array(poly)
    return 0.5 * abs(float(np.sum(p[:, 0] * np.roll(p[:, 1], -1) - np.roll(p[:, 0], -1) * p[:, 1])))


def reference_iou(a: np.ndarray, b: np.ndarray) -> float:
    ca = box_corners(torch.from_numpy(a)).numpy()
    cb = box_corners(torch.from_numpy(b)).numpy()
    ccw = lambda c: c if cross(c[1] - c[0], c[2] - c[1]) > 0 else c[::-1]  # noqa: E731
    inter = area(clip(list(ccw(ca)), ccw(cb)))
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def random_boxes(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    centre = torch.rand(n, 2, generator=g) * 40
    size = torch.rand(n, 2, generator=g) * 30 + 1
    angle = (torch.rand(n, 1, generator=g) - 0.5) * 2 * math.pi
    return torch.cat((centre, size, angle), 1).double()


def test_exact_iou_equals_polygon_clipping():
    a, b = random_boxes(40, 0), random_boxes(30, 1)
    special = torch.tensor([[10.0, 10, 8, 4, 0.3], [10.0, 10, 8, 4, 0.3 + math.pi],  # the same box, turned by pi
                            [10.0, 10, 8, 4, 0.3 + math.pi / 2],  # crossed: an octagon-like overlap
                            [30.0, 30, 2, 2, 0.0], [10.0, 10, 2, 2, 0.7]], dtype=torch.float64)  # apart; inside
    a, b = torch.cat((a, special)), torch.cat((b, special))
    ours = rotated_iou(a, b)
    expected = torch.tensor([[reference_iou(x.numpy(), y.numpy()) for y in b] for x in a], dtype=torch.float64)
    assert (expected > 0).sum() > 100 and (expected == 0).sum() > 100  # overlapping and disjoint pairs
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-5)
    s = special
    assert ours[-5, -4] == pytest.approx(1.0) and ours[-2, -3] == 0 and ours[-1, -5] == pytest.approx(4 / 32)
    torch.testing.assert_close(rotated_iou(a[:5], b[:5], pairwise=False), torch.diagonal(ours[:5, :5]))
    assert rotated_iou(s.float(), s.float()).dtype == torch.float32


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
    torch.testing.assert_close(torch.diagonal(rotated_iou(boxes, regular)), torch.ones(30), rtol=0, atol=1e-5)


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
    keep = rotated_nms(boxes, scores, 0.5)
    assert keep.tolist() == [1, 3, 4]  # 0 overlaps 1; 2 overlaps 4; 3 crosses 1 and stays
    iou = rotated_iou(boxes, boxes)
    assert 0.1 < iou[1, 3] < 0.5 and iou[0, 1] > 0.5 and iou[2, 4] > 0.5
    assert rotated_nms(boxes, scores, 0.5, overlap="probiou").tolist() == keep.tolist()
    # ultralytics' own rotated NMS (its Fast-NMS on ProbIoU) keeps the same boxes here
    theirs = ul_nms.TorchNMS.fast_nms(boxes, scores, 0.5, iou_func=ul_metrics.batch_probiou)
    assert theirs.tolist() == keep.tolist()
    assert rotated_nms(boxes[:0], scores[:0], 0.5).numel() == 0
