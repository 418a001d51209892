"""The YOLOv8 loss: near zero for a perfect prediction, finite on empty images, gradients in both
branches, and the same three terms as ultralytics' ``v8DetectionLoss`` on the same maps and targets."""
from types import SimpleNamespace

import pytest
import torch

from vision_attn import build_detector
from vision_attn.errors import DataError
from vision_attn.losses import DetectionLoss, box_to_dist, ciou, distribution_focal_loss
from vision_attn.models.yolo.detect import Detect
from tests.peers import import_ultralytics

REG_MAX, NC = 16, 2


def _head() -> Detect:
    head = Detect(nc=NC, reg_max=REG_MAX, ch=(8,))
    head.stride.copy_(torch.tensor([8.0]))
    return head


def _perfect_maps(box_grid: torch.Tensor, label: int) -> torch.Tensor:
    """A (1, 4*16 + 2, 4, 4) map whose anchors inside ``box_grid`` (grid units) predict exactly it."""
    feats = torch.zeros(1, 4 * REG_MAX + NC, 4, 4)
    feats[:, 4 * REG_MAX:] = -20.0  # background everywhere
    ys, xs = torch.meshgrid(torch.arange(4.0) + 0.5, torch.arange(4.0) + 0.5, indexing="ij")
    for y in range(4):
        for x in range(4):
            px, py = float(xs[y, x]), float(ys[y, x])
            x1, y1, x2, y2 = box_grid.tolist()
            if x1 < px < x2 and y1 < py < y2:
                for side, d in enumerate((px - x1, py - y1, x2 - px, y2 - py)):
                    feats[0, side * REG_MAX + int(d), y, x] = 30.0  # all mass on the exact (integer) distance
                feats[0, 4 * REG_MAX + label, y, x] = 20.0
    return feats


def test_a_perfect_prediction_gives_a_near_zero_loss():
    head = _head()
    box_grid = torch.tensor([0.5, 0.5, 3.5, 3.5])  # anchors at 1.5 and 2.5 see integer distances 1 and 2
    feats = _perfect_maps(box_grid, label=1)
    parts = DetectionLoss(head)([feats], [box_grid.view(1, 4) * 8], [torch.tensor([1])])
    assert parts.box < 1e-6 and parts.dfl < 1e-6 and parts.cls < 1e-6
    assert parts.total < 1e-5
    # the same maps with the other class: the box terms stay ~0, the class term does not
    wrong = DetectionLoss(head)([feats], [box_grid.view(1, 4) * 8], [torch.tensor([0])])
    assert wrong.box < 1e-6 and wrong.cls > 1.0


def test_dfl_and_ciou_pieces():
    assert torch.allclose(ciou(torch.tensor([0.0, 0, 2, 2]), torch.tensor([0.0, 0, 2, 2])), torch.tensor(1.0))
    assert ciou(torch.tensor([0.0, 0, 2, 2]), torch.tensor([4.0, 4, 6, 6])) < 0  # disjoint: penalties below 0
    logits = torch.full((1, 4, REG_MAX), -30.0)
    logits[0, :, 3] = logits[0, :, 4] = 0.0  # half the mass on bin 3, half on bin 4
    loss = distribution_focal_loss(logits, torch.full((1, 4), 3.5))
    assert torch.allclose(loss, torch.tensor([0.6931]), atol=1e-4)  # the best possible: the target's entropy
    d = box_to_dist(torch.tensor([[2.0, 2.0]]), torch.tensor([[0.0, 1.0, 40.0, 3.0]]), REG_MAX - 1)
    assert d.tolist() == [[2.0, 1.0, pytest.approx(14.99), 1.0]]  # clamped below the last bin


def test_gradients_reach_both_branches_and_empty_images_give_a_finite_loss():
    model = build_detector("configs/models/yolov8.yaml", scale="n", num_classes=3).train()
    x = torch.rand(2, 3, 64, 64)
    loss = DetectionLoss(model)
    parts = loss(model(x), [torch.tensor([[8.0, 8.0, 40.0, 30.0]]), torch.zeros(0, 4)],
                 [torch.tensor([2]), torch.zeros(0, dtype=torch.long)])
    parts.total.backward()
    head = model.model[-1]
    assert head.cv2[0][-1].weight.grad.abs().sum() > 0 and head.cv3[0][-1].weight.grad.abs().sum() > 0
    assert model.model[0].conv.weight.grad.abs().sum() > 0
    model.zero_grad()
    empty = loss(model(x), [torch.zeros(0, 4)] * 2, [torch.zeros(0, dtype=torch.long)] * 2)
    assert torch.isfinite(empty.total) and empty.box == 0 and empty.dfl == 0 and empty.cls > 0
    empty.total.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    with pytest.raises(DataError, match="class index 3 but the detector has 3 classes"):
        loss(model(x), [torch.tensor([[8.0, 8.0, 40.0, 30.0]])] * 2, [torch.tensor([3])] * 2)


def test_matches_ultralytics_v8_detection_loss():
    ul_loss = import_ultralytics("ultralytics.utils.loss")
    torch.manual_seed(0)
    model = build_detector("configs/models/yolov8.yaml", scale="n", num_classes=4).train()
    model.args = SimpleNamespace(box=7.5, cls=0.5, dfl=1.5)
    size = 96
    feats = [f.detach().requires_grad_(False) for f in model(torch.rand(3, 3, size, size))]
    boxes = [torch.tensor([[10.0, 12.0, 50.0, 70.0], [40.0, 30.0, 90.0, 60.0], [2.0, 2.0, 9.0, 8.0]]),
             torch.zeros(0, 4), torch.tensor([[20.0, 20.0, 80.0, 90.0]])]
    labels = [torch.tensor([0, 3, 1]), torch.zeros(0, dtype=torch.long), torch.tensor([2])]
    ours = DetectionLoss(model)(feats, boxes, labels)

    peer = ul_loss.v8DetectionLoss(model)
    b = feats[0].shape[0]
    flat = torch.cat([f.view(b, 4 * REG_MAX + 4, -1) for f in feats], 2)
    preds = {"boxes": flat[:, :4 * REG_MAX], "scores": flat[:, 4 * REG_MAX:], "feats": feats}
    xyxy = torch.cat(boxes)
    xywh = torch.cat(((xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]), 1) / size
    batch = {"batch_idx": torch.tensor([0.0, 0, 0, 2]), "cls": torch.cat(labels).float().view(-1, 1),
             "bboxes": xywh}
    _, items = peer(preds, batch)
    theirs = torch.stack([items[k] for k in ("box_loss", "cls_loss", "dfl_loss")])
    mine = torch.stack([7.5 * ours.box, 0.5 * ours.cls, 1.5 * ours.dfl])
    assert torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5), (mine, theirs)
