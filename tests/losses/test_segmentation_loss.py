"""The YOLOv8 segmentation loss: the same four terms as ultralytics' ``v8SegmentationLoss`` on the same
maps, coefficients, prototypes and (overlapping) masks; gradients to coefficients and prototypes;
finite on images without objects; the end-to-end form over both branches."""
from types import SimpleNamespace

import pytest
import torch

from vision_attn import build_detector
from vision_attn.errors import DataError
from vision_attn.losses import EndToEndLoss, SegmentationLoss
from tests.peers import import_ultralytics

SIZE, NC, REG_MAX = 96, 4, 16
BOXES = [torch.tensor([[10.0, 12.0, 50.0, 70.0], [40.0, 30.0, 90.0, 60.0], [30.0, 20.0, 60.0, 50.0]]),
         torch.zeros(0, 4), torch.tensor([[20.0, 20.0, 80.0, 90.0]])]
LABELS = [torch.tensor([0, 3, 1]), torch.zeros(0, dtype=torch.long), torch.tensor([2])]


def _overlap_masks(hw: int) -> torch.Tensor:
    """(B, hw, hw) instance indices 1..n per image (0: background), each instance an ellipse inside its box
    at mask resolution; later (smaller) instances painted over earlier ones, as ultralytics' overlap masks."""
    out = torch.zeros(len(BOXES), hw, hw)
    ys, xs = torch.meshgrid(torch.arange(hw) + 0.5, torch.arange(hw) + 0.5, indexing="ij")
    for i, boxes in enumerate(BOXES):
        for j, (x1, y1, x2, y2) in enumerate(boxes / SIZE * hw):
            cx, cy, rx, ry = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2, (y2 - y1) / 2
            out[i][((xs - cx) / rx) ** 2 + ((ys - cy) / ry) ** 2 <= 1] = j + 1
    return out


def _peer_inputs(out: dict, overlap: torch.Tensor) -> tuple[dict, dict]:
    b = out["feats"][0].shape[0]
    flat = torch.cat([f.view(b, 4 * REG_MAX + NC, -1) for f in out["feats"]], 2)
    preds = {"boxes": flat[:, :4 * REG_MAX], "scores": flat[:, 4 * REG_MAX:], "feats": out["feats"],
             "mask_coefficient": out["coeffs"], "proto": out["protos"]}
    xyxy = torch.cat(BOXES)
    xywh = torch.cat(((xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]), 1) / SIZE
    batch = {"batch_idx": torch.tensor([0.0, 0, 0, 2]), "cls": torch.cat(LABELS).float().view(-1, 1),
             "bboxes": xywh, "masks": overlap}
    return preds, batch


@pytest.mark.parametrize("mask_hw", [24, 48])  # the prototypes' resolution (96 / 4), and masks at 1/2
def test_matches_ultralytics_v8_segmentation_loss(mask_hw):
    ul_loss = import_ultralytics("ultralytics.utils.loss")
    torch.manual_seed(0)
    model = build_detector("configs/models/yolov8-seg.yaml", scale="n", num_classes=NC).train()
    model.args = SimpleNamespace(box=7.5, cls=0.5, dfl=1.5, overlap_mask=True)
    out = {k: (v.detach() if torch.is_tensor(v) else [f.detach() for f in v])
           for k, v in model(torch.rand(3, 3, SIZE, SIZE)).items()}
    overlap = _overlap_masks(mask_hw)
    masks = [torch.stack([overlap[i] == j + 1 for j in range(len(b))]) if len(b) else torch.zeros(0, mask_hw, mask_hw)
             for i, b in enumerate(BOXES)]
    ours = SegmentationLoss(model)(out, BOXES, LABELS, [m.to(torch.uint8) for m in masks])
    preds, batch = _peer_inputs(out, overlap)
    total, items = ul_loss.v8SegmentationLoss(model)(preds, batch)
    theirs = torch.stack([items[k] for k in ("box_loss", "seg_loss", "cls_loss", "dfl_loss")])
    mine = torch.stack([7.5 * ours.box, 7.5 * ours.seg, 0.5 * ours.cls, 1.5 * ours.dfl])
    assert ours.seg > 0
    assert torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5), (mine, theirs)
    assert torch.allclose(ours.total * 3, total.sum(), rtol=1e-4)  # ultralytics returns the parts times the batch


def test_gradients_reach_coefficients_and_prototypes_and_empty_batches_are_finite():
    model = build_detector("configs/models/yolov8-seg.yaml", scale="n", num_classes=NC).train()
    x = torch.rand(3, 3, SIZE, SIZE)
    overlap = _overlap_masks(24)
    masks = [torch.stack([overlap[i] == j + 1 for j in range(len(b))]).to(torch.uint8) if len(b)
             else torch.zeros(0, 24, 24, dtype=torch.uint8) for i, b in enumerate(BOXES)]
    loss = SegmentationLoss(model)
    loss(model(x), BOXES, LABELS, masks).total.backward()
    head = model.model[-1]
    assert head.cv4[0][-1].weight.grad.abs().sum() > 0 and head.proto.cv3.conv.weight.grad.abs().sum() > 0
    model.zero_grad()
    empty = loss(model(x), [torch.zeros(0, 4)] * 3, [torch.zeros(0, dtype=torch.long)] * 3,
                 [torch.zeros(0, 24, 24, dtype=torch.uint8)] * 3)
    assert torch.isfinite(empty.total) and empty.seg == 0 and empty.box == 0
    empty.total.backward()
    with pytest.raises(DataError, match="image 0 of the batch has 3 boxes but 2 masks"):
        loss(model(x), BOXES, LABELS, [masks[0][:2], masks[1], masks[2]])


def test_end_to_end_segmentation_loss_weighs_both_branches():
    model = build_detector(_yolo26_seg(), scale="n", num_classes=NC).train()
    overlap = _overlap_masks(24)
    masks = [torch.stack([overlap[i] == j + 1 for j in range(len(b))]).to(torch.uint8) if len(b)
             else torch.zeros(0, 24, 24, dtype=torch.uint8) for i, b in enumerate(BOXES)]
    out = model(torch.rand(3, 3, SIZE, SIZE))
    loss = EndToEndLoss(model, loss=SegmentationLoss, mask_gain=7.5)
    parts = loss(out, BOXES, LABELS, masks)
    many = loss.one_to_many(out["one2many"], BOXES, LABELS, masks)
    one = loss.one_to_one(out["one2one"], BOXES, LABELS, masks)
    o2m, o2o = loss.branch_weights
    assert torch.allclose(parts.total, o2m * many.total + o2o * one.total)
    assert parts.seg == one.seg
    parts.total.backward()
    # the one-to-one branch's coefficients learn (its few positives may sit on any level)
    assert sum(float(level[-1].weight.grad.abs().sum()) for level in model.model[-1].one2one_cv4) > 0


def _yolo26_seg() -> str:
    ul = import_ultralytics("ultralytics")
    from pathlib import Path
    return str(Path(ul.__file__).parent / "cfg" / "models" / "26" / "yolo26-seg.yaml")
