"""The detection module picks its loss from the head: the YOLOv8 loss for a plain Detect, the
end-to-end loss for YOLO26's end2end Detect and YOLOv10's v10Detect (read from ultralytics' own YAML,
the test-only peer), whose training step reaches both branches while the one-to-one branch's loss
stays out of the backbone."""
from pathlib import Path

import pytest
import torch

from vision_attn.losses import DetectionLoss, EndToEndLoss
from vision_attn.models.yolo.postprocess import is_end_to_end
from vision_attn.tasks.detect.module import DetectionModule
from tests.peers import import_ultralytics

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "models"


def _v10_yaml() -> str:
    ultralytics = import_ultralytics("ultralytics")
    return str(Path(ultralytics.__file__).parent / "cfg" / "models" / "v10" / "yolov10n.yaml")


def test_the_loss_follows_the_head():
    plain = DetectionModule(str(CONFIGS / "yolov8.yaml"), num_classes=3, ema_decay=None)
    assert type(plain.criterion) is DetectionLoss and not is_end_to_end(plain.model)
    yolo26 = DetectionModule(str(CONFIGS / "yolo26.yaml"), num_classes=3, ema_decay=None)
    assert isinstance(yolo26.criterion, EndToEndLoss) and is_end_to_end(yolo26.model)
    assert yolo26.criterion.reg_max == 1 and yolo26.criterion.branch_weights == pytest.approx((0.8, 0.2))
    v10 = DetectionModule(_v10_yaml(), num_classes=3, ema_decay=None, e2e_weights="yolov10")
    assert isinstance(v10.criterion, EndToEndLoss) and v10.criterion.branch_weights == (1.0, 1.0)


def test_a_v10_training_step_reaches_both_branches_but_not_through_the_one_to_one_loss():
    module = DetectionModule(_v10_yaml(), num_classes=3, ema_decay=None, channels_last=False)
    model, head = module.model.train(), module.model.model[-1]
    x = torch.rand(2, 3, 64, 64)
    boxes = [torch.tensor([[8.0, 8.0, 40.0, 30.0]]), torch.tensor([[20.0, 10.0, 60.0, 50.0]])]
    labels = [torch.tensor([2]), torch.tensor([0])]
    out = model(x)
    parts = module.criterion(out, boxes, labels)
    assert torch.isfinite(parts.total) and parts.box > 0 and parts.dfl > 0
    module.criterion.one_to_one(out["one2one"], boxes, labels).total.backward()  # the one-to-one loss alone
    assert head.one2one_cv3[0][-1].weight.grad.abs().sum() > 0
    assert head.cv2[0][-1].weight.grad is None and model.model[0].conv.weight.grad is None  # detached features
    model.zero_grad()
    parts = module.criterion(model(x), boxes, labels)
    parts.total.backward()
    assert model.model[0].conv.weight.grad.abs().sum() > 0 and head.cv3[0][-1].weight.grad.abs().sum() > 0
