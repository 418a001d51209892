"""The detection LightningModule: a YOLO-style detector built from a YAML, trained with the YOLOv8 loss,
or, when its head is end to end (YOLO26's ``end2end: True`` Detect, YOLOv10's ``v10Detect``), with
:class:`~vision_attn.losses.EndToEndLoss` (one-to-many and one-to-one branches, the branch weights moved
to the current epoch at the start of each) and NMS-free validation (top-k over the one-to-one branch);
an RT-DETR head (:class:`~vision_attn.models.yolo.rtdetr_decoder.RTDETRDecoder`) with
:class:`~vision_attn.losses.RTDETRLoss` (Hungarian matching; its denoising queries made from each batch's
boxes), the loss a mean over the batch's matches (not summed over images), and NMS-free validation.

Training: SGD (Nesterov momentum) or AdamW over three parameter groups (weights with decay; norm
weights and biases without), the YOLO warmup (biases from a high rate, momentum ramp) and a linear or
cosine decay (:class:`~vision_attn.tasks.detect.schedule.WarmupDecay`, set before every step), and an EMA
of the weights (``timm.utils.ModelEmaV3``, frozen so that DDP ignores it) whose decay ramps up as
``decay * (1 - exp(-step / ema_tau))``. The loss is summed over the images of a batch (YOLOv8's
convention, so SGD's rates match ultralytics'); a loss that is not finite stops training with a
:class:`TrainingError`. The mosaic is switched off for the last ``close_mosaic`` epochs.

Validation runs the EMA weights, keeps detections (confidence 0.001, multi-label, NMS at ``iou``) in
original image pixels, and at the end computes COCO mAP@[.5:.95] and mAP@.5 with
:func:`vision_attn.evaluation.coco_map` (gathered across processes), keeps the per-class AP table, and
saves ``predictions.png`` (sample images with ground truth and predicted boxes) in the run folder.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from vision_attn.errors import CheckpointError, ConfigError
from vision_attn.evaluation import coco_map
from vision_attn.io.state_dict import read_state_dict
from vision_attn.losses import detector_loss
from vision_attn.models.yolo import build_detector, load_yaml, scale_from_name
from vision_attn.models.yolo.files import read_model_yaml
from vision_attn.models.yolo.postprocess import to_original
from vision_attn.models.yolo.from_ultralytics import class_layer_keys, pretrained_yaml
from vision_attn.models.yolo.transfer import detector_state
from vision_attn.tasks.detect.plots import prediction_grid, save_image
from vision_attn.tasks.detect.run import detections_of_batch
from vision_attn.tasks.detect.schedule import WarmupDecay
from vision_attn.tasks.finite import stop_if_not_finite
from vision_attn.tasks.module_base import TrainingModule

__all__ = ["DetectionModule", "detector_param_groups", "load_detector_yaml", "DEFAULT_YAML"]

DEFAULT_YAML = "yolov8.yaml"


def load_detector_yaml(yaml: str) -> str:
    """The text of a detector YAML given as a path or shipped name (or YAML text itself)."""
    return read_model_yaml(yaml)


def detector_param_groups(model: nn.Module, weight_decay: float, backbone_lr_scale: float = 1.0
                          ) -> list[dict[str, Any]]:
    """Three groups as YOLOv8: ``weight`` (conv and linear kernels, with decay), ``norm`` (norm weights,
    no decay), ``bias`` (all biases, no decay; they get the warmup's high starting rate). With
    ``backbone_lr_scale`` other than 1, each group is split in two, the rows of the YAML's ``backbone``
    section getting ``lr_scale`` = ``backbone_lr_scale`` (the schedule's rate times it; RT-DETR's recipe)."""
    rows = len((getattr(model, "yaml", None) or {}).get("backbone") or []) if backbone_lr_scale != 1 else 0
    groups: dict[tuple[str, bool], dict[str, Any]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        kind = "bias" if name.endswith(".bias") else ("weight" if p.ndim > 1 else "norm")
        parts = name.split(".")
        backbone = rows > 0 and parts[0] == "model" and parts[1].isdigit() and int(parts[1]) < rows
        group = groups.setdefault((kind, backbone), {"params": [], "kind": kind,
                                                     "weight_decay": weight_decay if kind == "weight" else 0.0,
                                                     **({"lr_scale": backbone_lr_scale} if backbone else {})})
        group["params"].append(p)
    return [groups[k] for k in sorted(groups, key=lambda k: (("weight", "norm", "bias").index(k[0]), k[1]))]



def logged_parts(parts: Any) -> list[tuple[str, torch.Tensor]]:
    """The parts of a loss result (a dataclass: ``total`` with gradients, then detached tensors) logged as
    ``train/PART``: every tensor field but ``total``."""
    values = ((f.name, getattr(parts, f.name)) for f in dataclasses.fields(parts) if f.name != "total")
    return [(name, value) for name, value in values if isinstance(value, torch.Tensor)]

class DetectionModule(TrainingModule):
    """Images (B, 3, H, W) in [0, 1] -> detections, trained with the YOLOv8 loss.

    Args:
        yaml: the detector YAML (a path or a shipped name such as ``yolov8n.yaml``; ``configs/models/``); its
            text is stored in checkpoints. None: the YAML inside ``pretrained`` when it carries one (an
            ultralytics ``.pt``, a detection run's checkpoint), else ``yolov8.yaml``.
        scale: a letter of the YAML's ``scales`` (``n``, ``s``, ...; None: the YAML's ``scale`` key, else the
            letter in the file name, else the first).
        num_classes, class_names: set from the data.
        pretrained: a state dict (``.pt``/``.safetensors``, e.g. a run's ``model.safetensors``), a detection
            checkpoint or an ultralytics ``.pt`` (``best.pt``) to start from; tensors whose name and shape fit are
            loaded, and a warning names those that do not (the class outputs after a class-count change).
        optimizer: ``sgd`` (Nesterov, momentum ``momentum``) or ``adamw`` (beta1 = ``momentum``).
        lr: peak learning rate; lrf: final rate as a fraction of it; schedule: ``linear`` or ``cosine`` decay.
        momentum: SGD momentum / AdamW beta1; weight_decay: on conv and linear kernels only.
        warmup_epochs: warmup length (at least ``min_warmup_steps`` steps; 0: none);
            warmup_momentum: momentum at the start; warmup_bias_lr: the biases' starting rate
            (None: 0.1 for SGD, 0 for AdamW).
        box_gain, cls_gain, dfl_gain: weights of the loss terms (``dfl_gain``: of the L1 distance term for a
            ``reg_max`` 1 head); an RT-DETR head's loss has its own (class 1, L1 5, GIoU 2).
        backbone_lr_scale: the rows of the YAML's ``backbone`` section train at this fraction of the rate
            (RT-DETR's recipe: 0.1); 1: one rate for all.
        e2e_weights: an end-to-end head's branch weights: ``yolo26`` (ultralytics' ``E2ELoss``, which its
            trainer uses for YOLO26 and YOLOv10: one-to-many 0.8 -> 0.1 over the epochs, one-to-one top-7
            then 1) or ``yolov10`` (the YOLOv10 paper's, ``E2EDetectLoss``: both 1, one-to-one top-1).
        ema_decay: the EMA's decay (None: no EMA); ema_tau: steps over which it ramps up.
        close_mosaic: switch the mosaic off for this many final epochs.
        conf, iou, max_det: validation's confidence threshold, NMS IoU and detections per image.
        plot_images: images in ``predictions.png`` after each validation (0: none).
        coco_backend: ``faster`` (faster-coco-eval) or ``pycocotools`` for mAP: the same numbers, the first
            several times faster.
        channels_last: NHWC memory layout (faster convolutions on CPU).
        compile: ``torch.compile`` the network (opt in).
    """

    def __init__(
        self,
        yaml: str | None = None,
        scale: str | None = None,
        num_classes: int = 80,
        class_names: list[str] | None = None,
        pretrained: str | None = None,
        optimizer: Literal["sgd", "adamw"] = "adamw",
        lr: float = 0.002,
        lrf: float = 0.01,
        schedule: Literal["linear", "cosine"] = "linear",
        momentum: float = 0.937,
        weight_decay: float = 5e-4,
        warmup_epochs: float = 3.0,
        min_warmup_steps: int = 100,
        warmup_momentum: float = 0.8,
        warmup_bias_lr: float | None = None,
        box_gain: float = 7.5,
        cls_gain: float = 0.5,
        dfl_gain: float = 1.5,
        e2e_weights: Literal["yolo26", "yolov10"] = "yolo26",
        backbone_lr_scale: float = 1.0,
        ema_decay: float | None = 0.9999,
        ema_tau: float = 2000.0,
        close_mosaic: int = 10,
        conf: float = 0.001,
        iou: float = 0.7,
        max_det: int = 300,
        plot_images: int = 8,
        coco_backend: Literal["faster", "pycocotools"] = "faster",
        channels_last: bool = True,
        compile: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        if lr <= 0 or not 0 < lrf <= 1 or weight_decay < 0 or warmup_epochs < 0:
            raise ConfigError(f"model.lr={lr}, lrf={lrf}, weight_decay={weight_decay}, warmup_epochs={warmup_epochs}: "
                              f"give lr > 0, 0 < lrf <= 1 and the others >= 0")
        if not 0 <= momentum < 1 or not 0 <= warmup_momentum < 1:
            raise ConfigError(f"model.momentum={momentum}, warmup_momentum={warmup_momentum}: give values in [0, 1)")
        if not 0 < backbone_lr_scale <= 1:
            raise ConfigError(f"model.backbone_lr_scale={backbone_lr_scale}: give a fraction in (0, 1] of the rate")
        if ema_decay is not None and not 0 < ema_decay < 1:
            raise ConfigError(f"model.ema_decay={ema_decay}: give a value in (0, 1) (e.g. 0.9999), or null")
        if not 0 <= conf < 1 or not 0 < iou <= 1 or max_det < 1:
            raise ConfigError(f"model.conf={conf}, iou={iou}, max_det={max_det}: give 0 <= conf < 1, 0 < iou <= 1, "
                              f"max_det >= 1")
        carried = pretrained_yaml(pretrained) if yaml is None and pretrained is not None else None
        yaml = yaml if yaml is not None or carried else self.default_yaml
        self.yaml_source = yaml if yaml is not None else f"{pretrained} (its YAML)"
        self.yaml_text = carried or load_detector_yaml(yaml)
        if scale is None and yaml is not None and "\n" not in yaml:
            scale = scale_from_name(yaml)  # yolov8s.yaml: scale s
        self.model = build_detector(self.yaml_text, scale=scale, num_classes=num_classes, **self.network_options())
        if pretrained is not None:
            load_matching(self.model, pretrained)
        self.class_names = list(class_names) if class_names else [str(i) for i in range(num_classes)]
        if len(self.class_names) != num_classes:
            raise ConfigError(f"{len(self.class_names)} class names for {num_classes} classes")
        self.criterion = self.build_criterion(e2e_weights, box_gain=box_gain, cls_gain=cls_gain, dfl_gain=dfl_gain)
        if channels_last:
            self.model.to(memory_format=torch.channels_last)
        self.init_ema(ema_decay)
        self._schedule: WarmupDecay | None = None
        self._val_dets: list[dict[str, Any]] = []
        self._val_truth: list[dict[str, Any]] = []
        self._samples: dict[str, Any] | None = None
        self.last_report: Any = None  # the last validation's coco_map result
        self.last_val_step = -1

    task_name = "det"
    default_yaml = DEFAULT_YAML
    """The model YAML when neither ``yaml`` nor a ``pretrained`` file that carries one is given."""
    prediction_grid = staticmethod(prediction_grid)
    """How ``predictions.png`` is drawn."""

    heads: tuple[str, ...] = ("detect", "rtdetr")
    """The network families (the YAML network's ``task``) this module trains."""
    of_batch = staticmethod(detections_of_batch)
    """The network's eval output of a batch -> each image's results (:data:`~vision_attn.tasks.detect.run.OfBatch`)."""
    truth_keys: tuple[str, ...] = ()
    """The batch's targets beside boxes and labels that ``predictions.png`` draws (a segmenter's ``masks``)."""

    def network_options(self) -> dict[str, Any]:
        """Further arguments of :func:`~vision_attn.models.yolo.build_detector` that the data sets (a keypoint
        set's ``kpt_shape``); none for detection."""
        return {}

    def wrong_head(self) -> str:
        """The error for a YAML whose head this module does not train."""
        return (f"model.yaml={self.yaml_source}: its last row is {type(self.model.model[-1]).__name__}, a "
                f"{self.model.task} head; train det takes a detector YAML (yolov8n.yaml, ...)"
                + (", train seg this one" if self.model.task == "segment" else ""))

    def build_criterion(self, e2e_weights: str, **gains: float) -> nn.Module:
        """The loss of :attr:`model` (:func:`~vision_attn.losses.detector_loss`: the YOLOv8 loss, the
        end-to-end one for a head with a one-to-one branch, or RT-DETR's set loss for its decoder)."""
        if self.model.task not in self.heads:
            raise ConfigError(self.wrong_head())
        return detector_loss(self.model, e2e_weights=e2e_weights, **gains)

    def compute_loss(self, preds: Any, batch: dict[str, Any]) -> Any:
        """The criterion on the network's training output and a batch (every detector loss's one call,
        :class:`~vision_attn.losses.BatchLoss`)."""
        return self.criterion.batch_loss(preds, batch)

    def train_output(self, x: torch.Tensor, batch: dict[str, Any]) -> Any:
        """The network's training output for the images ``x`` of ``batch``, called with what the criterion
        says (an RT-DETR decoder also gets its denoising targets, made from the batch's boxes)."""
        return self.model(*self.criterion.network_inputs(x, batch))

    # ---------------------------------------------------------------- network
    def _layout(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.hparams.channels_last else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, 3, H, W) -> decoded (B, 4 + nc, A) of :meth:`eval_model` (in eval mode)."""
        return self.eval_model()(self._layout(x))

    def setup(self, stage: str) -> None:
        if self.hparams.compile and stage == "fit" and not getattr(self, "_compiled", False):
            self.model.compile()
            self._compiled = True

    # ---------------------------------------------------------------- training
    def _planned_epochs(self) -> int:
        """The run's epochs: ``max_epochs``, else what ``max_steps`` amounts to, else the current one + 1."""
        trainer = self.trainer
        if trainer.max_epochs is not None and trainer.max_epochs > 0:
            return int(trainer.max_epochs)
        batches = trainer.num_training_batches
        if trainer.max_steps > 0 and math.isfinite(batches) and batches > 0:
            return max(math.ceil(trainer.max_steps * trainer.accumulate_grad_batches / batches), 1)
        return self.current_epoch + 1

    def on_train_epoch_start(self) -> None:
        dm = getattr(self.trainer, "datamodule", None)
        max_epochs = self.trainer.max_epochs or 0
        if dm is not None and hasattr(dm, "set_mosaic") and max_epochs > 0:
            if self.current_epoch >= max_epochs - self.hparams.close_mosaic:
                dm.set_mosaic(False)
        logged = self.criterion.start_epoch(self.current_epoch, max(self._planned_epochs(), self.current_epoch + 1))
        for key, value in logged.items():
            self.log(f"train/{key}", value, on_step=False, on_epoch=True, batch_size=1)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self._schedule is not None:
            lr = self._schedule.apply(self.optimizers(use_pl_optimizer=False), self.global_step)
            self.log("train/lr", lr, on_step=False, on_epoch=True, batch_size=1)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        x = self._layout(batch["images"])
        parts = self.compute_loss(self.train_output(x, batch), batch)
        n = x.shape[0]
        stop_if_not_finite(self, parts.total, batch_idx, clip="10")
        self.log("train/loss", parts.total.detach(), on_step=True, on_epoch=True, prog_bar=True, batch_size=n)
        for key, value in logged_parts(parts):
            self.log(f"train/{key}", value, on_step=False, on_epoch=True, batch_size=n)
        # YOLO's losses are means per image that its trainer sums over the batch; RT-DETR's is a mean over boxes
        return parts.total * n if self.criterion.sum_over_images else parts.total

    def advance_ema(self, step: int) -> None:
        """The EMA's decay ramps up as ``ema_decay * (1 - exp(-step / ema_tau))`` (YOLO's)."""
        self.ema.decay = self.hparams.ema_decay * (1 - math.exp(-step / self.hparams.ema_tau))
        self.ema.update(self.model)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["model_yaml"] = load_yaml(self.yaml_text)[0]  # the model description itself, not a path
        checkpoint["model_scale"] = self.model.scale

    # ---------------------------------------------------------------- validation
    def on_validation_epoch_start(self) -> None:
        self._val_dets, self._val_truth, self._samples = [], [], None

    @torch.no_grad()
    def detect(self, batch: dict[str, Any]) -> list[dict[str, Any]]:
        """Detections of a batch by :attr:`of_batch`: per image in original image pixels (numpy; a detector's
        ``{image_id, boxes, scores, labels}``), the same in network-input pixels under ``input_*`` keys
        (``input_boxes``) and the input's side as ``input_size``."""
        hp = self.hparams
        found = self.of_batch(self(batch["images"]), self.eval_model(), batch, conf=hp.conf, iou=hp.iou,
                              max_det=hp.max_det, multi_label=True)
        return [{**d, "input_size": int(batch["images"].shape[-1])} for d in found]

    @staticmethod
    def scored(det: dict[str, Any]) -> dict[str, Any]:
        """One image's detections as the evaluation takes them: without the network-input copies."""
        return {k: v for k, v in det.items() if not k.startswith("input_")}

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        dets = self.detect(batch)
        self._val_dets.extend(self.scored(d) for d in dets)
        for iid, size, scale, pad, boxes, labels in zip(batch["image_ids"], batch["orig_sizes"], batch["scales"],
                                                        batch["pads"], batch["boxes"], batch["labels"]):
            self._val_truth.append({"image_id": int(iid), "orig_size": tuple(size), "labels": labels.cpu().numpy(),
                                    "boxes": to_original(boxes.float(), scale=scale, pad=pad, orig_size=size).cpu().numpy()})
        k = self.hparams.plot_images
        if batch_idx == 0 and k > 0 and self._samples is None:
            self._samples = {"images": batch["images"][:k].cpu(),
                             "predictions": [self.sample_prediction(d) for d in dets[:k]],
                             "truths": [{"boxes": batch["boxes"][i].cpu().numpy(),
                                         "labels": batch["labels"][i].cpu().numpy(),
                                         **{key: batch[key][i].cpu().numpy() for key in self.truth_keys}}
                                        for i in range(min(k, len(batch["boxes"])))]}

    def sample_prediction(self, det: dict[str, Any]) -> dict[str, Any]:
        """What ``predictions.png`` draws of one image's detections (network-input pixels)."""
        return {"boxes": det["input_boxes"], "scores": det["scores"], "labels": det["labels"]}

    def _gathered(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        dets, truth = self._val_dets, self._val_truth
        if self.trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            parts: list[Any] = [None] * self.trainer.world_size
            torch.distributed.all_gather_object(parts, (dets, truth))
            dets = [d for p in parts for d in p[0]]
            truth = [t for p in parts for t in p[1]]
        # a distributed sampler repeats images to even out the shares: keep each image once
        dets = list({d["image_id"]: d for d in dets}.values())
        truth = list({t["image_id"]: t for t in truth}.values())
        return dets, truth

    def on_validation_epoch_end(self) -> None:
        dets, truth = self._gathered()
        dm = getattr(self.trainer, "datamodule", None)
        truth_source = dm.ground_truth() if dm is not None and hasattr(dm, "ground_truth") else None
        if truth_source is not None:  # exact original boxes (no letterbox rounding)
            seen = {t["image_id"] for t in truth}
            truth = [t for t in truth_source if t["image_id"] in seen]
        ids = dm.category_ids() if dm is not None and hasattr(dm, "category_ids") else \
            list(range(1, len(self.class_names) + 1))
        for key, value in self.evaluate(truth, dets, ids).items():
            self.log(key, value, prog_bar=True, batch_size=1)
        if self.trainer.sanity_checking:
            return
        self.last_val_step = self.global_step
        if self._samples is not None and self.trainer.is_global_zero and self.trainer.default_root_dir:
            grid = self.prediction_grid(self._samples["images"], self._samples["predictions"], self._samples["truths"],
                                   self.class_names)
            save_image(grid, Path(self.trainer.default_root_dir) / "predictions.png")
        self._val_dets, self._val_truth, self._samples = [], [], None

    def evaluate(self, truth: list[dict[str, Any]], dets: list[dict[str, Any]], category_ids: list[int]
                 ) -> dict[str, float]:
        """COCO box mAP of one validation (kept in :attr:`last_report`) -> the metrics to log."""
        report = coco_map(truth, dets, names=self.class_names, category_ids=category_ids,
                          backend=self.hparams.coco_backend)
        self.last_report = report
        return {"val/mAP50-95": float(report.map), "val/mAP50": float(report.map50)}

    # ---------------------------------------------------------------- optimisation
    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        groups = detector_param_groups(self.model, hp.weight_decay, hp.backbone_lr_scale)
        if hp.optimizer == "sgd":
            optimizer = self.build_optimizer("sgd", groups, lr=hp.lr, momentum=hp.momentum, nesterov=True)
        elif hp.optimizer == "adamw":
            optimizer = self.build_optimizer("adamw", groups, lr=hp.lr, betas=(hp.momentum, 0.999))
        else:
            raise ConfigError(f"model.optimizer={hp.optimizer!r}: choose sgd or adamw")
        total, per_epoch = self.optimizer_steps()
        warmup = 0 if hp.warmup_epochs == 0 else max(int(round(hp.warmup_epochs * per_epoch)), hp.min_warmup_steps)
        bias_lr = hp.warmup_bias_lr if hp.warmup_bias_lr is not None else (0.1 if hp.optimizer == "sgd" else 0.0)
        self._schedule = WarmupDecay(lr=hp.lr, lrf=hp.lrf, total_steps=total, warmup_steps=min(warmup, total),
                                     momentum=hp.momentum, warmup_momentum=hp.warmup_momentum,
                                     warmup_bias_lr=bias_lr, shape=hp.schedule)
        self._schedule.apply(optimizer, self.global_step)
        return optimizer


def load_matching(model: nn.Module, path: str) -> tuple[int, int]:
    """Load the tensors of the state dict at ``path`` whose name and shape fit ``model``; return
    (loaded, total in the model)."""
    if not Path(path).is_file():
        raise CheckpointError(f"model.pretrained={path}: no such file")
    state = detector_state(read_state_dict(path))
    own = model.state_dict()
    fit = {k: v for k, v in state.items() if k in own and tuple(v.shape) == tuple(own[k].shape)}
    if not fit:
        raise CheckpointError(f"model.pretrained={path}: no tensor fits this detector (names or shapes differ)")
    model.load_state_dict(fit, strict=False)
    refit = class_layer_keys(state, own)
    if refit:  # e.g. the file's detector has another class count: its class outputs do not fit
        warnings.warn(f"model.pretrained={path}: loaded {len(fit)} of {len(own)} tensors; {len(refit)} differ in shape "
                      f"and start from their initialisation ({', '.join(refit[:6])}"
                      f"{' ...' if len(refit) > 6 else ''}): the file's model has another class count", stacklevel=2)
    return len(fit), len(own)
