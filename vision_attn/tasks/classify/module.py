"""The classification LightningModule: any ``create_model`` network trained with DeiT-style tools.

Training: AdamW (:mod:`vision_attn.tasks.optim` groups), linear warmup then cosine decay per step
(timm's ``CosineLRScheduler``, stepped through Lightning's ``lr_scheduler_step`` hook), label
smoothing, Mixup/CutMix (``timm.data.Mixup`` with ``SoftTargetCrossEntropy``), an EMA of the weights
(``timm.utils.ModelEmaV3``, frozen so that DDP ignores it) that validation evaluates instead of the
live weights, layer-wise learning-rate decay, and DeiT hard distillation from a teacher through the
distillation token. A loss that is not finite stops training with a :class:`TrainingError` naming
the step. Validation: loss, top-1 and top-5 (torchmetrics, synchronised across processes) and a
confusion matrix kept for the end-of-run report.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.scheduler import CosineLRScheduler
from torch import nn
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from vision_attn.layers.naflex_batch import NaFlexBatch
from vision_attn.errors import ConfigError
from vision_attn.models import create_model
from vision_attn.tasks.classify.network import build_network, network_spec
from vision_attn.tasks.classify.run import load_classifier
from vision_attn.tasks.classify.yolo import yolo_network_spec
from vision_attn.tasks.finite import stop_if_not_finite
from vision_attn.tasks.module_base import TrainingModule
from vision_attn.tasks.optim import param_groups

__all__ = ["ClassificationModule", "is_cnn"]


def is_cnn(model: nn.Module) -> bool:
    """A convolutional network (no patch embedding), which runs faster in channels_last."""
    return not hasattr(model, "patch_embed") and any(isinstance(m, nn.Conv2d) for m in model.modules())


class ClassificationModule(TrainingModule):
    """Images (B, 3, H, W) -> logits (B, num_classes), trained with cross-entropy.

    Args:
        name: a ``create_model`` name (``vit_tiny_patch16_224``, ``deit_tiny_distilled_patch16_224``,
            ``swin_tiny_patch4_window7_224``, ``resnet18``, ``timm:NAME``); default: the architecture of a
            transformers folder given as ``pretrained``, else ``vit_tiny_patch16_224``.
        model_kwargs: keyword arguments for the model (``patch_size``, ``depth``, ``embed_dim``, ...).
        attention: attention blocks to insert in a CNN (``"cbam"``, ``"se"``, or a dict; see ``create_model``).
        pretrained: a local checkpoint to start from (timm, torchvision, official or vision_attn layout),
            or a Hugging Face transformers folder (config.json + weights): its sizes are recorded in
            the run's ``model_kwargs``.
        num_classes: set from the data. img_size: set from the data (passed to the model unless
            ``model_kwargs`` has one, or the name starts with ``timm:``). class_names: set from the data.
        lr: peak learning rate (after warmup); min_lr: the cosine's floor; warmup_lr: the warmup's start.
        warmup_epochs: warmup length in epochs (fractions allowed).
        weight_decay: AdamW's decoupled weight decay (not on norms, biases, tokens, position tables).
        betas: AdamW's betas.
        layer_decay: layer-wise learning-rate decay for fine-tuning (e.g. 0.65; None: off).
        label_smoothing: smoothing of the one-hot targets.
        mixup: Mixup alpha (0: off); cutmix: CutMix alpha (0: off); mixup_prob: chance a batch is mixed;
            mixup_switch_prob: chance to use CutMix instead of Mixup when both are on.
        ema_decay: decay of the weights' exponential moving average (None: no EMA); validation,
            checkpoints' ``best`` and the exported weights use the EMA. ema_warmup: ramp the decay up
            from 0 over the first steps (for short runs).
        teacher: a teacher checkpoint for DeiT hard distillation (a run's ``best.ckpt`` or
            ``model.safetensors``, or a weights file of ``teacher_model``); needs a ``*_distilled`` student.
        teacher_model: the teacher's model name when ``teacher`` is a plain weights file;
            teacher_kwargs: its keyword arguments; teacher_img_size: the image size the teacher sees
            (the student's images are resized to it; default: the size of the teacher's run, else none).
        channels_last: NHWC memory layout (None: on for CNNs).
        compile: ``torch.compile`` the network (opt in: compiling takes tens of seconds).
        freeze: ``"backbone"``: a linear probe: only the classifier trains (the rest keeps the
            pretrained weights, in eval mode: no dropout, BatchNorm statistics kept); ``"none"``: all.
        yaml: a YOLO classifier YAML instead of ``name`` (``yolov8-cls.yaml``, ``yolov8n-cls.yaml``, a
            path; its last row a ``Classify`` head): see :mod:`vision_attn.tasks.classify.yolo`; the run
            records its text. scale: the YAML's scale letter (default: the file name's, else its first);
            recorded as ``yaml_scale``.
    """

    task_name = "cls"  # the model description is in hyper_parameters: name, model_kwargs, ...

    def __init__(
        self,
        name: str | None = None,
        model_kwargs: dict[str, Any] | None = None,
        attention: str | dict[str, Any] | None = None,
        pretrained: str | None = None,
        num_classes: int = 1000,
        img_size: int | None = None,
        class_names: list[str] | None = None,
        lr: float = 1e-3,
        min_lr: float = 1e-5,
        warmup_lr: float = 1e-6,
        warmup_epochs: float = 5.0,
        weight_decay: float = 0.05,
        betas: tuple[float, float] = (0.9, 0.999),
        layer_decay: float | None = None,
        label_smoothing: float = 0.1,
        mixup: float = 0.0,
        cutmix: float = 0.0,
        mixup_prob: float = 1.0,
        mixup_switch_prob: float = 0.5,
        ema_decay: float | None = None,
        ema_warmup: bool = True,
        teacher: str | None = None,
        teacher_model: str | None = None,
        teacher_kwargs: dict[str, Any] | None = None,
        teacher_img_size: int | None = None,
        channels_last: bool | None = None,
        compile: bool = False,
        freeze: Literal["none", "backbone"] = "none",
        yaml: str | None = None,
        scale: str | None = None,
    ) -> None:
        # resolved before save_hyperparameters reads them
        if yaml is not None:  # a YOLO classifier: its label, the YAML's text and the scale it builds at
            name, yaml, scale = yolo_network_spec(name, yaml, scale, model_kwargs=model_kwargs, attention=attention,
                                                  pretrained=pretrained, freeze=freeze)
        elif scale is not None:
            raise ConfigError(f"model.scale={scale!r} without model.yaml: a scale letter picks a YOLO YAML's size; "
                              "give model.yaml (e.g. yolov8-cls.yaml) or drop model.scale")
        else:
            name, model_kwargs = network_spec(name, model_kwargs, pretrained)
        super().__init__()
        # ``scale`` is recorded as ``yaml_scale``: the data module has a ``scale`` (its crop's area range)
        self.save_hyperparameters(ignore=["scale"])
        if yaml is not None:
            self.hparams["yaml_scale"] = scale
        if lr <= 0 or min_lr < 0 or warmup_epochs < 0 or weight_decay < 0:
            raise ConfigError(f"model.lr={lr}, min_lr={min_lr}, warmup_epochs={warmup_epochs}, "
                              f"weight_decay={weight_decay}: give lr > 0 and the others >= 0")
        if not 0 <= label_smoothing < 1:
            raise ConfigError(f"model.label_smoothing={label_smoothing}: give a value in [0, 1)")
        if layer_decay is not None and not 0 < layer_decay <= 1:
            raise ConfigError(f"model.layer_decay={layer_decay}: give a value in (0, 1] (e.g. 0.65), or null")
        if ema_decay is not None and not 0 < ema_decay < 1:
            raise ConfigError(f"model.ema_decay={ema_decay}: give a value in (0, 1) (e.g. 0.999), or null")
        self.model = build_network(name, model_kwargs, attention=attention, pretrained=pretrained,
                                   num_classes=num_classes, img_size=img_size, yaml=yaml, scale=scale)
        self.class_names = list(class_names) if class_names else [str(i) for i in range(num_classes)]
        if freeze not in ("none", "backbone"):
            raise ConfigError(f"model.freeze={freeze!r}: give 'backbone' (train the classifier only) or 'none'")
        self._heads = self._classifiers() if freeze == "backbone" else ()  # a tuple: no second registration
        if self._heads:
            self.model.requires_grad_(False)
            for head in self._heads:
                head.requires_grad_(True)
        self.use_channels_last = is_cnn(self.model) if channels_last is None else channels_last
        if self.use_channels_last:
            self.model.to(memory_format=torch.channels_last)
        self.init_ema(ema_decay, use_warmup=ema_warmup, warmup_power=3 / 4)
        self.distilled = bool(getattr(self.model, "distilled", False))
        self._teacher: nn.Module | None = None  # kept out of the module tree: not trained, not saved
        self._teacher_size: int | None = None
        if teacher is not None:
            if not self.distilled:
                raise ConfigError(f"model.teacher is set but {name} has no distillation token: use a *_distilled model "
                                  f"(e.g. deit_tiny_distilled_patch16_224) for DeiT hard distillation")
            net, size = load_teacher(teacher, teacher_model, teacher_kwargs, num_classes)
            object.__setattr__(self, "_teacher", net)
            self._teacher_size = teacher_img_size or size  # None: the student's input as it is
        self.mixup_fn = None
        if mixup > 0 or cutmix > 0:
            self.mixup_fn = Mixup(mixup_alpha=mixup, cutmix_alpha=cutmix, prob=mixup_prob,
                                  switch_prob=mixup_switch_prob, label_smoothing=label_smoothing,
                                  num_classes=num_classes)
        self.soft_loss = SoftTargetCrossEntropy()
        top_k = min(5, num_classes)
        self.val_top1 = MulticlassAccuracy(num_classes, top_k=1, average="micro")
        self.val_top5 = MulticlassAccuracy(num_classes, top_k=top_k, average="micro")
        self.val_confusion = MulticlassConfusionMatrix(num_classes)
        self.last_confusion: torch.Tensor | None = None  # (C, C) counts, rows: true class
        self.last_val_step = -1  # the optimizer step of the last validation

    # ---------------------------------------------------------------- network
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, 3, H, W) -> logits (B, num_classes) of :meth:`eval_model`."""
        return self.eval_model()(self._layout(x))

    def _layout(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(x, NaFlexBatch):
            return x
        return x.contiguous(memory_format=torch.channels_last) if self.use_channels_last else x

    def setup(self, stage: str) -> None:
        if self.hparams.compile and stage == "fit" and not getattr(self, "_compiled", False):
            self.model.compile()
            self._compiled = True

    def on_fit_start(self) -> None:
        if self._teacher is not None:
            self._teacher.to(self.device)

    # ---------------------------------------------------------------- training
    def _loss(self, out: torch.Tensor | tuple[torch.Tensor, torch.Tensor], x: torch.Tensor,
              target: torch.Tensor) -> torch.Tensor:
        soft = target.ndim == 2

        def base(logits: torch.Tensor) -> torch.Tensor:
            if soft:
                return self.soft_loss(logits, target)
            return F.cross_entropy(logits, target, label_smoothing=self.hparams.label_smoothing)

        if not isinstance(out, tuple):
            return base(out)
        cls, dist = out
        if self._teacher is None:  # a distilled model without teacher: both heads learn the labels
            return (base(cls) + base(dist)) / 2
        with torch.no_grad():
            size = self._teacher_size
            if size is not None and tuple(x.shape[-2:]) != (size, size):  # the size the teacher was trained at
                x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
            teacher_labels = self._teacher(x).argmax(dim=-1)
        return 0.5 * base(cls) + 0.5 * F.cross_entropy(dist, teacher_labels)  # DeiT hard distillation

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        x = self._layout(x)
        target: torch.Tensor = y
        if self.mixup_fn is not None:
            if isinstance(x, NaFlexBatch):
                raise ConfigError("Mixup/CutMix mix images of one size; data.naflex batches patch sequences: set "
                                  "model.mixup: 0 and model.cutmix: 0")
            if x.shape[0] % 2:
                raise ConfigError(f"Mixup/CutMix need an even batch; got {x.shape[0]} images: use an even "
                                  f"data.batch_size and data.drop_last true")
            x, target = self.mixup_fn(x, y)
        loss = self._loss(self.model(x), x, target)
        stop_if_not_finite(self, loss, batch_idx, clip="1.0")
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=len(y))
        return loss

    # ---------------------------------------------------------------- validation
    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.val_top1(logits, y)
        self.val_top5(logits, y)
        self.val_confusion.update(logits, y)
        self.log("val/loss", loss, on_epoch=True, sync_dist=True, batch_size=len(y))
        self.log("val/top1", self.val_top1, on_epoch=True, prog_bar=True, batch_size=len(y))
        self.log("val/top5", self.val_top5, on_epoch=True, batch_size=len(y))

    def on_validation_epoch_end(self) -> None:
        self.last_confusion = self.val_confusion.compute().cpu()  # synchronised across processes
        self.val_confusion.reset()
        if not self.trainer.sanity_checking:
            self.last_val_step = self.global_step

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        return self(x).float().softmax(dim=-1)

    # ---------------------------------------------------------------- optimisation
    def _classifiers(self) -> tuple[nn.Module, ...]:
        """The classifier(s) a linear probe trains: ``get_classifier()`` (and DeiT's distillation head)."""
        heads = (self.model.get_classifier(), getattr(self.model, "head_dist", None))
        heads = tuple(h for h in heads if isinstance(h, nn.Module) and any(True for _ in h.parameters()))
        if not heads:
            raise ConfigError(f"model.freeze=backbone: {type(self.model).__name__} has no classifier to train "
                              "(num_classes=0?); give a class count or freeze: none")
        return heads

    def train(self, mode: bool = True) -> "ClassificationModule":
        """Lightning's train/eval switch; under ``freeze="backbone"`` the backbone stays in eval mode."""
        super().train(mode)
        if mode and getattr(self, "_heads", ()):
            self.model.eval()
            for head in self._heads:
                head.train()
        return self

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        groups = param_groups(self.model, weight_decay=hp.weight_decay, layer_decay=hp.layer_decay)
        optimizer = self.build_optimizer("adamw", groups, lr=hp.lr, betas=tuple(hp.betas))
        total, per_epoch = self.optimizer_steps()
        warmup = min(int(round(hp.warmup_epochs * per_epoch)), total - 1)
        scheduler = CosineLRScheduler(optimizer, t_initial=total, lr_min=hp.min_lr, warmup_t=warmup,
                                      warmup_lr_init=hp.warmup_lr, warmup_prefix=False, t_in_epochs=False)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def lr_scheduler_step(self, scheduler: CosineLRScheduler, metric: Any = None) -> None:
        """timm's schedulers take the number of optimizer steps taken so far."""
        scheduler.step_update(num_updates=self.global_step)


def load_teacher(path: str, model: str | None, kwargs: dict[str, Any] | None,
                 num_classes: int) -> tuple[nn.Module, int | None]:
    """A frozen teacher in eval mode, from a run's checkpoint or a weights file of ``model``, and the
    image size it was trained at (a run's; None for a weights file)."""
    if Path(path).suffix == ".ckpt" or model is None:
        if Path(path).suffix != ".ckpt" and model is None:
            raise ConfigError(f"model.teacher={path!r} is a weights file: also set model.teacher_model to its "
                              f"model name (or give a run's best.ckpt)")
        clf = load_classifier(path)
        net, size = clf.model, clf.data_hparams.get("img_size")
    else:
        net, size = create_model(model, pretrained=path, num_classes=num_classes, **(kwargs or {})), None
    out = getattr(net, "num_classes", num_classes)
    if out != num_classes:
        raise ConfigError(f"teacher {path} predicts {out} classes, the data has {num_classes}: give a teacher "
                          f"trained on these classes")
    return net.eval().requires_grad_(False), (int(size) if isinstance(size, int) else None)
