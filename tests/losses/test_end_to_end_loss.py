"""The end-to-end loss against ultralytics 8.4.190 on the same predictions and batch: its
``v8DetectionLoss`` for a ``reg_max`` 1 head (L1 instead of DFL), the one-to-one assignment with
``tal_topk2``, ``E2ELoss`` (YOLO26: one-to-many weight 0.8 -> 0.1 over the epochs) and
``E2EDetectLoss`` (YOLOv10: equal weights, top-1); the decay state travels in the state dict."""
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.losses import YOLOV10_WEIGHTS, DetectionLoss, EndToEndLoss, TaskAlignedAssigner
from vision_attn.models.yolo.detect import Detect
from tests.peers import import_ultralytics

NC, SIZE, EPOCHS = 4, 96, 14
BOXES = [torch.tensor([[10.0, 12.0, 50.0, 70.0], [40.0, 30.0, 90.0, 60.0], [2.0, 2.0, 9.0, 8.0]]),
         torch.zeros(0, 4), torch.tensor([[20.0, 20.0, 80.0, 90.0], [60.0, 5.0, 70.0, 20.0]])]
LABELS = [torch.tensor([0, 3, 1]), torch.zeros(0, dtype=torch.long), torch.tensor([2, 0])]


class _Model(nn.Module):
    """What both losses read of a detector: ``model[-1]`` the head, ``args`` ultralytics' gains."""

    def __init__(self, reg_max: int) -> None:
        super().__init__()
        head = Detect(nc=NC, reg_max=reg_max, ch=(8, 8, 8))
        head.stride.copy_(torch.tensor([8.0, 16.0, 32.0]))
        self.model = nn.ModuleList([head])
        self.args = SimpleNamespace(box=7.5, cls=0.5, dfl=1.5, epochs=EPOCHS)


def _maps(reg_max: int, seed: int) -> list[torch.Tensor]:
    """Random head maps at 96 px: distances of 0.3-4 cells (reg_max 1) or bin logits, class logits."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in (12, 6, 3):
        box = torch.rand(3, 4, n, n, generator=g) * 3.7 + 0.3 if reg_max == 1 else \
            torch.randn(3, 4 * reg_max, n, n, generator=g)
        out.append(torch.cat((box, torch.randn(3, NC, n, n, generator=g)), 1))
    return out


def _ultralytics_preds(maps: list[torch.Tensor], reg_max: int) -> dict[str, torch.Tensor]:
    flat = torch.cat([m.flatten(2) for m in maps], 2)
    return {"boxes": flat[:, :4 * reg_max], "scores": flat[:, 4 * reg_max:], "feats": maps}


def _ultralytics_batch() -> dict[str, torch.Tensor]:
    xyxy = torch.cat(BOXES)
    xywh = torch.cat(((xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]), 1) / SIZE
    return {"batch_idx": torch.tensor([0.0, 0, 0, 2, 2]), "cls": torch.cat(LABELS).float().view(-1, 1), "bboxes": xywh}


def _gained(parts) -> torch.Tensor:
    return torch.stack([7.5 * parts.box, 0.5 * parts.cls, 1.5 * parts.dfl])


@pytest.mark.parametrize("topk, topk2", [(10, None), (7, 1), (1, None)])
def test_reg_max_1_loss_and_second_cut_match_ultralytics(topk, topk2):
    ul = import_ultralytics("ultralytics.utils.loss")
    model, maps = _Model(reg_max=1), _maps(1, seed=0)
    ours = DetectionLoss(model, topk=topk, topk2=topk2)(maps, BOXES, LABELS)
    peer = ul.v8DetectionLoss(model, tal_topk=topk, tal_topk2=topk2)
    total, items = peer.loss(_ultralytics_preds(maps, 1), _ultralytics_batch())
    assert ours.dfl > 0 and ours.box > 0  # the L1 term (ultralytics' l1_loss) is live
    theirs = torch.stack([items[k] for k in ("box_loss", "cls_loss", "l1_loss")])
    assert torch.allclose(_gained(ours), theirs, rtol=1e-4, atol=1e-6), (_gained(ours), theirs)
    assert torch.allclose(ours.total * 3, total.sum(), rtol=1e-4)


def test_the_second_cut_keeps_one_positive_per_box():
    g = torch.Generator().manual_seed(1)
    scores, boxes = torch.rand(1, 64, 2, generator=g), torch.rand(1, 64, 4, generator=g) * 8
    boxes[..., 2:] += boxes[..., :2] + 20
    points = torch.stack(torch.meshgrid(torch.arange(8.0), torch.arange(8.0), indexing="xy"), -1).view(-1, 2) * 4 + 2
    gt = torch.tensor([[[0.0, 0.0, 20.0, 20.0], [10.0, 8.0, 32.0, 30.0]]])
    args = (scores, boxes, points, torch.tensor([[0, 1]]), gt, torch.ones(1, 2, dtype=torch.bool))
    many = TaskAlignedAssigner(topk=7)(*args)
    one = TaskAlignedAssigner(topk=7, topk2=1)(*args)
    assert many.foreground.sum() > 2 and one.foreground.sum() == 2
    assert set(one.gt_index[one.foreground].tolist()) == {0, 1}
    assert (one.foreground <= many.foreground).all()
    with pytest.raises(ValueError, match="topk2"):
        TaskAlignedAssigner(topk=7, topk2=8)


@pytest.mark.parametrize("reg_max", [1, 16])
def test_yolo26_e2e_loss_matches_ultralytics_over_the_epochs(reg_max):
    ul = import_ultralytics("ultralytics.utils.loss")
    model = _Model(reg_max)
    preds = {"one2many": _maps(reg_max, seed=2), "one2one": _maps(reg_max, seed=3)}
    ul_preds = {k: _ultralytics_preds(v, reg_max) for k, v in preds.items()}
    ours, peer = EndToEndLoss(model), ul.E2ELoss(model)
    for epoch in range(EPOCHS):  # ultralytics' trainer calls update() after each epoch
        ours.set_epoch(epoch, EPOCHS)
        assert ours.branch_weights == pytest.approx((peer.o2m, peer.o2o))
        if epoch in (0, 6, EPOCHS - 1):
            parts = ours(preds, BOXES, LABELS)
            total, items = peer(ul_preds, _ultralytics_batch())
            assert torch.allclose(parts.total * 3, total.sum(), rtol=1e-4)
            assert torch.allclose(_gained(parts), torch.stack(list(items.values())), rtol=1e-4, atol=1e-6)
        peer.update()
    assert ours.branch_weights == pytest.approx((0.1, 0.9))


def test_yolov10_e2e_detect_loss_matches_ultralytics():
    ul = import_ultralytics("ultralytics.utils.loss")
    model = _Model(16)
    preds = {"one2many": _maps(16, seed=4), "one2one": _maps(16, seed=5)}
    parts = EndToEndLoss(model, weights="yolov10")(preds, BOXES, LABELS)
    total, _ = ul.E2EDetectLoss(model)({k: _ultralytics_preds(v, 16) for k, v in preds.items()}, _ultralytics_batch())
    assert EndToEndLoss(model, weights=YOLOV10_WEIGHTS).branch_weights == (1.0, 1.0)
    assert torch.allclose(parts.total * 3, total.sum(), rtol=1e-4)


def test_the_epoch_is_module_state_and_bad_input_is_named():
    model = _Model(1)
    loss = EndToEndLoss(model)
    loss.set_epoch(9, EPOCHS)
    state = loss.state_dict()
    resumed = EndToEndLoss(model)
    assert resumed.branch_weights == pytest.approx((0.8, 0.2))
    resumed.load_state_dict(state)
    assert resumed.branch_weights == pytest.approx(loss.branch_weights) and resumed.epoch == 9
    assert not [k for k in state if k != "_extra_state"]  # no tensors: nothing leaks into the weights
    with pytest.raises(ConfigError, match="no one-to-one branch"):
        loss(_maps(1, seed=0), BOXES, LABELS)
    with pytest.raises(ConfigError, match="choose one of"):
        EndToEndLoss(model, weights="yolo27")
