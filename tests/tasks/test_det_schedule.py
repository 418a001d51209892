"""The YOLO warmup/decay schedule and the detector's parameter groups."""
import pytest
import torch

from vision_attn.tasks.detect.schedule import WarmupDecay
from vision_attn.tasks.detect.module import detector_param_groups


def _schedule(**kw):
    args = dict(lr=0.01, lrf=0.01, total_steps=1000, warmup_steps=100, momentum=0.937, warmup_momentum=0.8,
                warmup_bias_lr=0.1)
    args.update(kw)
    return WarmupDecay(**args)


def test_warmup_then_linear_or_cosine_decay():
    s = _schedule()
    assert s.values(0, bias=True) == (0.1, 0.8) and s.values(0, bias=False) == (0.0, 0.8)
    lr50, m50 = s.values(50, bias=False)
    assert lr50 == pytest.approx(0.5 * 0.01 * s.factor(50)) and m50 == pytest.approx(0.8685)
    assert s.values(100, bias=True) == (pytest.approx(0.01 * s.factor(100)), 0.937)  # biases came down to it
    assert s.factor(0) == 1 and s.factor(500) == pytest.approx(0.505) and s.factor(1000) == pytest.approx(0.01)
    cos = _schedule(shape="cosine")
    assert cos.factor(500) == pytest.approx(0.505) and cos.factor(250) > s.factor(250)
    assert cos.factor(2000) == pytest.approx(0.01)  # past the end: the floor


def test_apply_sets_rates_and_momentum_per_group():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    groups = detector_param_groups(net, weight_decay=5e-4)
    assert [g["kind"] for g in groups] == ["weight", "norm", "bias"]
    assert [len(g["params"]) for g in groups] == [1, 1, 2] and groups[0]["weight_decay"] == 5e-4
    assert groups[1]["weight_decay"] == groups[2]["weight_decay"] == 0
    sgd = torch.optim.SGD(groups, lr=0.01, momentum=0.937, nesterov=True)
    rate = _schedule().apply(sgd, 0)
    assert rate == 0.0 and [g["lr"] for g in sgd.param_groups] == [0.0, 0.0, 0.1]
    assert all(g["momentum"] == 0.8 for g in sgd.param_groups)
    adamw = torch.optim.AdamW(detector_param_groups(net, weight_decay=5e-4), lr=0.002, betas=(0.9, 0.999))
    _schedule(lr=0.002, momentum=0.9, warmup_bias_lr=0.0).apply(adamw, 1000)
    assert all(g["lr"] == pytest.approx(0.002 * 0.01) and g["betas"] == (0.9, 0.999) for g in adamw.param_groups)
