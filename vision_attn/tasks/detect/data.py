"""The detection LightningDataModule: a data set string -> train and val DataLoaders of padded-free
batches (:func:`vision_attn.data.collate_detection`).

``data`` is what :func:`vision_attn.data.open_detection` opens: ``demo:digit-boxes``, a YOLO data
YAML, or a COCO folder. Training items are augmented (mosaic, affine, colour jitter, optional flips);
validation items are letterboxed only. Workers are seeded and persistent; switching the mosaic off
reaches them through shared memory. With ``augment="device"`` the training workers only decode
(:class:`~vision_attn.data.det_device_augment.DetectionItems`) and the batch is augmented by
:class:`~vision_attn.data.det_device_augment.DetectionDeviceAugment`: its draws and targets in
:meth:`~DetectionDataModule.on_before_batch_transfer` (CPU), its pixels in
:meth:`~DetectionDataModule.on_after_batch_transfer` (the training device), seeded by the batch's
position (:func:`~vision_attn.data.device_augment.batch_seed`), so a resumed run augments as the
uninterrupted one.
"""
from __future__ import annotations

import os
from typing import Any, Literal

import torch
from torch.utils.data import DataLoader

from vision_attn.data import DetectionTransform, collate_detection, open_detection
from vision_attn.data.det_device_augment import DetectionDeviceAugment, DetectionItems, ImagePlan
from vision_attn.data.device_augment import AUGMENT_ON, batch_seed
from vision_attn.data.faults import Faults, screen_images
from vision_attn.data.loader import check_loader_args
from vision_attn.errors import ConfigError, DataError
from vision_attn.tasks.data_module import ResumableDataModule, training_position

__all__ = ["DetectionDataModule"]


class DetectionDataModule(ResumableDataModule):
    """Detection data for training and validation.

    Args:
        data: ``demo:digit-boxes``, a YOLO data YAML (or its folder), or a COCO folder
            (``annotations/instances_{train,val}.json`` + ``images/{train,val}/``).
        format: ``auto``, ``coco`` or ``yolo`` (which copy of a folder that has both).
        skip_bad_images: decode every image once before training and leave out those that fail or whose
            labels cannot be used (each listed in the log and in metrics.json); otherwise the first bad
            file stops training with its path.
        img_size: side of the square (letterboxed) images, a multiple of the detector's largest stride (32).
        batch_size: images per device and step; eval_batch_size: for validation (default: twice that).
        mosaic: probability of a 4-image mosaic in training (switched off for the model's last
            ``close_mosaic`` epochs).
        affine_scale, translate: affine ranges (zoom 1 +- affine_scale, shift +- translate of the size);
            degrees, shear: rotation and shear ranges in degrees (0: none, the default);
            hflip, vflip: flip probabilities (0 for digits and text);
        hsv: hue, saturation and value shift limits; min_visibility: share of a box that must stay visible.
        augment: where the training augmentation runs: ``"loader"``: in the loader workers (albumentations,
            per image); ``"device"``: the workers only decode, and the mosaic, affine, HSV and flips run on
            each batch where it trains (the GPU), from the same distributions (a mosaic's other images are
            drawn from its batch); not for instance masks.
        num_workers: loader processes (0: load in the training process); persistent_workers: keep them
            between epochs; pin_memory: page-locked batches (None: when CUDA is available).
        drop_last: drop the incomplete last training batch.
        seed: seed of the augmentation in the training process.
    """

    def __init__(
        self,
        data: str = "demo:digit-boxes",
        format: Literal["auto", "coco", "yolo"] = "auto",
        skip_bad_images: bool = False,
        img_size: int = 640,
        batch_size: int = 16,
        eval_batch_size: int | None = None,
        mosaic: float = 1.0,
        affine_scale: float = 0.5,
        translate: float = 0.1,
        degrees: float = 0.0,
        shear: float = 0.0,
        hflip: float = 0.0,
        vflip: float = 0.0,
        hsv: tuple[float, float, float] = (5.0, 40.0, 30.0),
        min_visibility: float = 0.25,
        augment: Literal["loader", "device"] = "loader",
        num_workers: int = 2,
        persistent_workers: bool = True,
        pin_memory: bool | None = None,
        drop_last: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_loader_args(batch_size, eval_batch_size, num_workers)
        if img_size % 32:
            raise ConfigError(f"data.img_size={img_size}: give a multiple of 32 (the detector's largest stride), "
                              f"e.g. {max(32, round(img_size / 32) * 32)}")
        if augment not in AUGMENT_ON:
            raise ConfigError(f"data.augment={augment!r}: choose one of {', '.join(AUGMENT_ON)} (where the mosaic, "
                              f"affine, HSV and flips of training run)")
        if augment == "device" and self.masks:
            raise ConfigError("data.augment=device moves boxes, keypoints and oriented boxes on the device, not "
                              "instance masks: set data.augment: loader for segmentation")
        self.save_hyperparameters()
        self._augmenter: DetectionDeviceAugment | None = None  # augment="device": made on first use
        self._plan: tuple[list[ImagePlan], Any] | None = None  # the batch in hand's, between the two hooks
        self.train_set: Any = None
        self.val_set: Any = None
        self.faults = Faults("skip" if skip_bad_images else "raise")  # both splits' bad files and label changes

    # ---------------------------------------------------------------- data
    masks = False
    """Whether items carry instance masks (the segmentation task's data module sets it)."""
    keypoints = False
    """Whether items carry keypoints (the pose task's data module sets it)."""
    obb = False
    """Whether items carry oriented boxes (the OBB task's data module sets it)."""

    def mask_options(self) -> dict[str, Any]:
        """The transform's mask arguments (none for detection)."""
        return {}

    def _open(self, split: str, train: bool, faults: Faults) -> Any:
        hp = self.hparams
        transform: Any
        if train and hp.augment == "device":  # the workers decode; the batch is augmented on the device
            transform = DetectionItems(hp.img_size, keypoints=self.keypoints, obb=self.obb)
        else:
            transform = DetectionTransform(hp.img_size, train=train, mosaic=hp.mosaic, hflip=hp.hflip, vflip=hp.vflip,
                                           scale=hp.affine_scale, translate=hp.translate, degrees=hp.degrees,
                                           shear=hp.shear, hsv=tuple(hp.hsv), min_visibility=hp.min_visibility,
                                           seed=hp.seed if train else None, keypoints=self.keypoints, obb=self.obb,
                                           **self.mask_options())
        dataset = open_detection(hp.data, split, fmt=hp.format, transform=transform, faults=faults,
                                 masks=self.masks, keypoints=self.keypoints, obb=self.obb)
        threads = max(1, os.cpu_count() or 1)
        if faults.mode == "skip":  # decoded once now, so that no bad image reaches training
            dataset.verify(threads=threads)
        else:  # gathering every problem of the set: each image screened (header, ending)
            screen_images([r.path for r in dataset.records], faults, threads)
        return dataset

    def scan(self) -> "DetectionDataModule":
        """Open (and check) both splits once; also what :meth:`setup` calls. Without ``skip_bad_images``
        every problem of both splits is gathered first and one DataError lists them all."""
        if self.train_set is None:
            gather = self.faults.mode == "raise"
            faults = Faults("collect") if gather else self.faults
            train_set, val_set = self._open("train", True, faults), self._open("val", False, faults)
            if gather:
                faults.raise_problems(f"data {self.hparams.data}")
                self.faults.notes += faults.notes
                self.faults.counts.update(faults.counts)
                train_set.faults = val_set.faults = self.faults  # a fault met later (when read) raises
            self.train_set, self.val_set = train_set, val_set
            if list(self.train_set.names) != list(self.val_set.names):
                raise DataError(f"{self.hparams.data}: the train and val splits name different classes "
                                f"({self.train_set.names} vs {self.val_set.names})")
        return self

    @property
    def augmenter(self) -> DetectionDeviceAugment | None:
        """``augment="device"``: what augments the training batches (made once the sets are scanned and
        checked); None on the loader path."""
        hp = self.hparams
        if hp.augment != "device":
            return None
        if self._augmenter is None:
            spec = self.scan().train_set.keypoint_spec
            self._augmenter = DetectionDeviceAugment(
                hp.img_size, mosaic=hp.mosaic, hflip=hp.hflip, vflip=hp.vflip, scale=hp.affine_scale,
                translate=hp.translate, hsv=tuple(hp.hsv), min_visibility=hp.min_visibility, degrees=hp.degrees,
                shear=hp.shear, keypoints=self.keypoints, obb=self.obb,
                flip_idx=None if spec is None else spec.flip_idx)
        return self._augmenter

    @property
    def _mosaic_holder(self) -> Any:
        """What holds the mosaic's probability: the device augmentation, or the loader's transform."""
        augmenter = self.augmenter
        return augmenter if augmenter is not None else self.scan().train_set.transform

    @property
    def names(self) -> list[str]:
        return list(self.scan().train_set.names)

    @property
    def num_classes(self) -> int:
        return len(self.names)

    def model_fill(self) -> dict[str, Any]:
        """The module's arguments the data sets (the Task record's ``filled``): its classes."""
        return {"num_classes": self.num_classes, "class_names": self.names}

    def category_ids(self) -> list[int]:
        """The COCO category id of each class index."""
        return list(self.scan().val_set.category_ids)

    def ground_truth(self) -> list[dict[str, Any]]:
        """The validation boxes in original pixels, per image (what ``coco_map`` takes)."""
        return self.scan().val_set.ground_truth()

    def summary(self) -> str:
        self.scan()
        return (f"train {self.train_set.stats.summary()}; val {self.val_set.stats.summary()}; "
                f"{self.num_classes} classes")

    def set_mosaic(self, on: bool) -> None:
        """Mosaic on (at the configured probability) or off; DataLoader workers see the change."""
        self._mosaic_holder.mosaic = self.hparams.mosaic if on else 0.0

    def setup(self, stage: str | None = None) -> None:
        self.scan()
        hp = self.hparams
        if stage in (None, "fit") and hp.drop_last and len(self.train_set) < hp.batch_size:
            raise ConfigError(f"data.batch_size={hp.batch_size} is larger than the {len(self.train_set)} training "
                              f"images, and data.drop_last drops the only batch: lower data.batch_size")
        if stage in (None, "fit", "validate") and len(self.val_set) == 0:
            raise ConfigError(f"{hp.data}: no validation images")

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """The loader's position and whether the mosaic has been closed (what a resumed run restores
        before its first batch, so that loader workers already see it)."""
        state = super().state_dict()
        if self.train_set is not None:
            state["mosaic"] = float(self._mosaic_holder.mosaic)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        if "mosaic" in state_dict:
            self._mosaic_holder.mosaic = float(state_dict["mosaic"])

    # ---------------------------------------------------------------- loaders
    def train_dataloader(self) -> DataLoader:
        self.scan()
        return self.loader(self.train_set, self.hparams.batch_size, train=True, collate_fn=collate_detection)

    def val_dataloader(self) -> DataLoader:
        self.scan()
        return self.loader(self.val_set, self.hparams.eval_batch_size or 2 * self.hparams.batch_size, train=False,
                           collate_fn=collate_detection)

    # ---------------------------------------------------------------- augment="device"
    def _augments(self, batch: Any) -> bool:
        trainer = self.trainer
        return (self.hparams.augment == "device" and trainer is not None and trainer.training
                and isinstance(batch, dict) and batch["images"].dtype == torch.uint8)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """``augment="device"``: a training batch's draws and targets, on the CPU (its images follow in
        :meth:`on_after_batch_transfer`), seeded by the batch's position (rank, epoch, batch)."""
        if not self._augments(batch):
            return batch
        trainer = self.trainer
        epoch, batch_index = training_position(trainer)  # of the batch in hand: it is not done yet
        batch, plans, hsv = self.augmenter.plan(batch, batch_seed(self.hparams.seed, trainer.global_rank, epoch,
                                                                  batch_index))
        self._plan = (plans, hsv)
        return batch

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """``augment="device"``: a training batch's images augmented where they are now, as float32 in
        [0, 1] in the precision's input dtype; every other batch as it is."""
        if not self._augments(batch):
            return batch
        if self._plan is None:
            raise RuntimeError("data.augment=device: a training batch reached the device without its plan "
                               "(on_before_batch_transfer was not called)")
        plans, hsv = self._plan
        self._plan = None
        images = self.augmenter.images(batch["images"], plans, hsv)
        return {**batch, "images": self.trainer.precision_plugin.convert_input(images)}
