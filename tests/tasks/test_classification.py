"""The classification LightningModule: losses, distillation, EMA, schedule, the NaN guard."""
import math

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from vision_attn import create_model
from vision_attn.errors import ConfigError, TrainingError
from vision_attn.io.atomic import save_torch as save_atomic
from vision_attn.tasks import ClassificationModule

pytestmark = pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`",
                                        "ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated")

TINY = {"patch_size": 8, "depth": 1, "embed_dim": 32, "num_heads": 2}


def _module(**kw) -> ClassificationModule:
    kw.setdefault("name", "vit_tiny_patch16_224")
    kw.setdefault("model_kwargs", TINY)
    return ClassificationModule(num_classes=3, img_size=16, warmup_epochs=0, **kw)


def _loader(n=16, batch=4, nan_at=None):
    x = torch.randn(n, 3, 16, 16)
    if nan_at is not None:
        x[nan_at * batch] = float("nan")
    return DataLoader(TensorDataset(x, torch.arange(n) % 3), batch_size=batch)


def _trainer(**kw) -> pl.Trainer:
    return pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0, **kw)


def test_nan_loss_stops_with_the_step():
    module = _module()
    with pytest.raises(TrainingError, match=r"training loss is nan at step 2 \(epoch 0, batch 2\).*lower model.lr"):
        _trainer(max_steps=10).fit(module, _loader(nan_at=2))


def test_scheduler_warms_up_then_follows_the_cosine_per_step():
    module = ClassificationModule(num_classes=3, img_size=16, model_kwargs=TINY, lr=1e-2, min_lr=0.0, warmup_lr=0.0,
                                  warmup_epochs=1.0)
    trainer = _trainer(max_epochs=3, limit_val_batches=0)
    lrs = []

    class Spy(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    trainer.callbacks.append(Spy())
    trainer.fit(module, _loader(n=16, batch=4))  # 4 steps an epoch, 12 in all, warmup 4
    assert lrs[0] == 0.0 and lrs[2] == pytest.approx(1e-2 * 2 / 4)
    assert lrs[6] == pytest.approx(0.5e-2 * (1 + math.cos(math.pi * 6 / 12)))
    assert len(lrs) == 12


def test_mixup_cutmix_train_and_odd_batches_are_refused():
    module = _module(mixup=0.8, cutmix=1.0)
    _trainer(max_steps=2, limit_val_batches=0).fit(module, _loader())
    with pytest.raises(ConfigError, match="even batch"):
        _trainer(max_steps=2, limit_val_batches=0).fit(_module(mixup=0.8), _loader(n=9, batch=3))


def test_hard_distillation_uses_the_teachers_labels(tmp_path):
    teacher = create_model("resnet18", num_classes=3)
    with torch.no_grad():
        teacher.fc.weight.zero_()
        teacher.fc.bias.copy_(torch.tensor([0.0, 0.0, 10.0]))  # always predicts class 2
    path = save_atomic(teacher.state_dict(), tmp_path / "teacher.safetensors")
    module = _module(name="deit_tiny_distilled_patch16_224", teacher=str(path), teacher_model="resnet18",
                     label_smoothing=0.0)
    module.model.train()
    x, y = torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 0, 1])
    with torch.no_grad():
        cls, dist = module.model(x)
        expected = 0.5 * F.cross_entropy(cls, y) + 0.5 * F.cross_entropy(dist, torch.full((4,), 2))
        assert float(module._loss((cls, dist), x, y)) == pytest.approx(float(expected), rel=1e-6)
    assert "_teacher" not in dict(module.named_children()) and not any(
        k.startswith("_teacher") for k in module.state_dict())
    seen = []
    sized = _module(name="deit_tiny_distilled_patch16_224", teacher=str(path), teacher_model="resnet18",
                    teacher_img_size=32)
    sized._teacher.register_forward_pre_hook(lambda m, args: seen.append(tuple(args[0].shape)))
    sized.model.train()
    with torch.no_grad():
        sized._loss(sized.model(x), x, y)
    assert seen == [(4, 3, 32, 32)]  # the teacher sees the size it was trained at
    with pytest.raises(ConfigError, match="no distillation token"):
        _module(teacher=str(path), teacher_model="resnet18")
    with pytest.raises(ConfigError, match="set model.teacher_model"):
        _module(name="deit_tiny_distilled_patch16_224", teacher=str(path))


def test_ema_is_frozen_updated_and_evaluated():
    module = _module(ema_decay=0.9)
    assert not any(p.requires_grad for p in module.ema.parameters())
    _trainer(max_steps=4, limit_val_batches=0).fit(module, _loader())
    assert module._ema_step == 4
    live = dict(module.model.named_parameters())
    ema = dict(module.ema.module.named_parameters())
    assert not torch.equal(live["head.weight"], ema["head.weight"])
    assert module.eval_model() is module.ema.module


def test_cnn_runs_channels_last():
    module = ClassificationModule(name="resnet18", num_classes=3, img_size=16)
    assert module.use_channels_last
    assert module.model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    _trainer(max_steps=1, limit_val_batches=0).fit(module, _loader())
