"""The classification LightningDataModule: a data root -> train and val DataLoaders.

Batches are ``(images (B, 3, H, W), labels (B,) int64)``: the images uint8 through the loader and
normalised to float32 once on the training device (``normalize="device"``, :meth:`on_after_batch_transfer`),
or float32 from the loader (``normalize="loader"``); the same values either way. Workers are seeded
(:func:`~vision_attn.data.seed_worker`), persistent and pinned when asked; under DDP each process
reads its own share (:class:`~vision_attn.data.sampler.EpochSampler`). The root is class folders or a
shard set that ``vision-attn data pack`` wrote from them (:mod:`~vision_attn.data.shards`): the same
items in the same order, so the same batches.
"""
from __future__ import annotations

import os
from typing import Any, Literal

from torch.utils.data import DataLoader

from vision_attn.data import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ClassificationSplits,
    ImageFolder,
    eval_transforms,
    is_demo,
    load_splits,
    materialise,
    train_transforms,
)
from vision_attn.data.device_augment import AUGMENT_ON, DeviceAugment, batch_seed
from vision_attn.data.file_transforms import EvalFileTransform, TrainFileTransform
from vision_attn.data.loader import check_loader_args
from vision_attn.data.naflex import NaFlexCollate
from vision_attn.data.naflex_budget import NaFlexBatchSampler, TokenBudget
from vision_attn.data.transforms import naflex_transforms
from vision_attn.data.normalize import NORMALIZE_ON, PixelNormalize
from vision_attn.data.shards import ShardDataset, ShardSplits, is_shard_set, open_shards
from vision_attn.errors import ConfigError
from vision_attn.layers.naflex_batch import NaFlexBatch
from vision_attn.tasks.data_module import ResumableDataModule, training_position

__all__ = ["ClassificationDataModule"]


class ClassificationDataModule(ResumableDataModule):
    """Image folders for classification.

    Args:
        root: ``ROOT/train`` + ``ROOT/val`` class folders, one folder of class folders (split by
            ``val_fraction``), a built-in data set (``demo:digits``, ``demo:faces``), or a shard set
            of ``vision-attn data pack`` (its folder or ``index.json``, local or a URL; packed with its split).
        img_size: side of the square images the model sees.
        batch_size: images per device and step (training); ``eval_batch_size``: for validation
            (default: twice ``batch_size``).
        val_fraction: share of each class held out for validation when there is no ``val/``.
        split_seed: seed of that split.
        skip_bad_images: check every image once before training and skip those that do not decode
            (their count is reported); otherwise the first unreadable image stops training with its path.
        scale: area range of the random resized crop; ratio: its aspect ratio range.
        hflip: probability of a horizontal flip (0 for digits and text).
        color_jitter: strength of brightness, contrast and saturation jitter (0: none).
        rand_augment: RandAugment-style operations per image (0: none);
            rand_augment_magnitude: their strength in [0, 10].
        random_erasing: probability of erasing a random rectangle with random pixels (0: none; DeiT 0.25).
        crop_pct: evaluation crop: resize to ``img_size / crop_pct``, centre crop ``img_size``.
        mean: normalisation mean (RGB, 0..1); std: its standard deviation (None: ImageNet's; training
            from a pretrained checkpoint fills in the checkpoint's, e.g. CLIP's, see ``train cls``).
        interpolation: resampling of the crops and resizes.
        normalize: where the images are normalised (``mean``, ``std``): ``"device"``: they go through
            the loader as uint8 (a quarter of float32's bytes through the workers, the pinned memory
            and the copy to the GPU) and are normalised on the training device; ``"loader"``: in the
            loader workers, as float32. The same float32 operations either way: the same training.
        augment: where colour jitter, RandAugment and random erasing run: ``"loader"``: in the loader
            workers, per image (albumentations); ``"device"``: on each training batch once it is on
            the training device (:class:`~vision_attn.data.device_augment.DeviceAugment`: the same
            operations and distributions, the workers left to decode, crop and flip; needs
            ``normalize="device"``). For a GPU whose loader cannot keep up.
        num_workers: loader processes (0: load in the training process).
        persistent_workers: keep the workers between epochs.
        pin_memory: page-locked batches (None: when CUDA is available).
        drop_last: drop the incomplete last training batch (needed by Mixup, which wants even batches).
        seed: seed of the augmentation pipeline in the training process.
        naflex: NaFlex (0: off): each image at its own aspect ratio, resized to at most a number of
            patches of ``naflex_patch`` px and patchified; a batch is padded with a mask
            (:class:`~vision_attn.data.naflex.NaFlexBatch`). An integer: the patches per image, in
            batches of ``batch_size`` padded to their longest sequence. A mapping: timm's NaFlex loader's
            token budget (:class:`~vision_attn.data.naflex_budget.TokenBudget`: ``max_tokens_per_batch``,
            ``train_seq_lens``, ``max_seq_len``, ``batch_divisor``): each training batch draws a sequence
            length and holds as many images as the budget allows, every image once per epoch
            (``drop_last`` unused); validation batches of ``eval_batch_size`` at ``max_seq_len``. No crop (``scale``, ``ratio`` and ``crop_pct`` are
            unused), flips and colour jitter only, normalised in the loader; the model must take patch
            batches (a ViT with a learned or no position table: ``naflexvit_*_siglip``, ``vit_*``).
        naflex_patch: the patch size of ``naflex`` (None: the model's, filled in by ``train cls``; 16
            for a data module used alone).
    """

    def __init__(
        self,
        root: str = "demo:digits",
        img_size: int = 224,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        val_fraction: float = 0.2,
        split_seed: int = 0,
        skip_bad_images: bool = False,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (0.75, 1.3333333333333333),
        hflip: float = 0.5,
        color_jitter: float = 0.4,
        rand_augment: int = 0,
        rand_augment_magnitude: float = 9.0,
        random_erasing: float = 0.0,
        crop_pct: float = 0.875,
        mean: tuple[float, float, float] | None = None,
        std: tuple[float, float, float] | None = None,
        interpolation: Literal["nearest", "bilinear", "bicubic", "area", "lanczos"] = "bicubic",
        normalize: Literal["device", "loader"] = "device",
        augment: Literal["loader", "device"] = "loader",
        num_workers: int = 2,
        persistent_workers: bool = True,
        pin_memory: bool | None = None,
        drop_last: bool = True,
        seed: int = 0,
        naflex: int | dict[str, Any] = 0,
        naflex_patch: int | None = None,
    ) -> None:
        mean, std = mean or IMAGENET_MEAN, std or IMAGENET_STD  # before save_hyperparameters reads them
        super().__init__()
        check_loader_args(batch_size, eval_batch_size, num_workers)
        if normalize not in NORMALIZE_ON:
            raise ConfigError(f"data.normalize={normalize!r}: choose one of {', '.join(NORMALIZE_ON)} (where the "
                              "images are normalised: on the training device, or in the loader)")
        if augment not in AUGMENT_ON:
            raise ConfigError(f"data.augment={augment!r}: choose one of {', '.join(AUGMENT_ON)} (where colour "
                              "jitter, RandAugment and random erasing run)")
        if augment == "device" and normalize != "device":
            raise ConfigError("data.augment=device augments the uint8 batch on the device: set data.normalize: "
                              "device too")
        if naflex and augment == "device":
            raise ConfigError("data.naflex: images of many sizes are augmented in the loader; set data.augment: loader")
        if naflex and rand_augment or naflex and random_erasing:
            raise ConfigError("data.naflex takes flips and colour jitter only: set data.rand_augment: 0 and "
                              "data.random_erasing: 0")
        self.budget = TokenBudget.from_config(naflex, batch_size) if isinstance(naflex, dict) else None
        self.collate = NaFlexCollate(naflex_patch or 16, self.budget.max_seq_len if self.budget else naflex) \
            if naflex else None
        self.save_hyperparameters()
        self.pixels = PixelNormalize(mean, std)  # what on_after_batch_transfer does to a uint8 batch
        # augment="device": what on_after_batch_transfer does to a training batch instead
        self.augmenter = DeviceAugment(color_jitter=color_jitter, rand_augment=rand_augment,
                                       rand_augment_magnitude=rand_augment_magnitude, random_erasing=random_erasing,
                                       interpolation=interpolation, mean=mean, std=std) if augment == "device" else None
        self.splits: ClassificationSplits | ShardSplits | None = None
        self.train_set: ImageFolder | ShardDataset | None = None
        self.val_set: ImageFolder | ShardDataset | None = None

    # ---------------------------------------------------------------- data
    def prepare_data(self) -> None:
        """Materialise a built-in data set once (on one process per node)."""
        if is_demo(self.hparams.root):
            materialise(self.hparams.root.split(":", 1)[1])

    def scan(self) -> ClassificationSplits | ShardSplits:
        """Resolve the root into train and val samples (once); also what :meth:`setup` calls."""
        if self.splits is None:
            self.prepare_data()
            hp = self.hparams
            threads = max(1, os.cpu_count() or 1)
            if is_shard_set(hp.root):
                self.splits = open_shards(hp.root, skip_bad_images=hp.skip_bad_images, threads=threads)
            else:
                self.splits = load_splits(hp.root, val_fraction=hp.val_fraction, split_seed=hp.split_seed,
                                          skip_bad_images=hp.skip_bad_images, threads=threads)
        return self.splits

    @property
    def classes(self) -> list[str]:
        return self.scan().classes

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def setup(self, stage: str | None = None) -> None:
        splits = self.scan()
        hp = self.hparams
        on_loader = self.augmenter is None  # else the workers decode, crop and flip; the rest is on the device
        train_tf = train_transforms(hp.img_size, scale=hp.scale, ratio=hp.ratio, hflip=hp.hflip,
                                    color_jitter=hp.color_jitter if on_loader else 0.0,
                                    rand_augment=hp.rand_augment if on_loader else 0,
                                    rand_augment_magnitude=hp.rand_augment_magnitude,
                                    random_erasing=hp.random_erasing if on_loader else 0.0, mean=hp.mean, std=hp.std,
                                    interpolation=hp.interpolation, seed=hp.seed)
        # from the file: the crop drawn on the header's size, a JPEG decoded at reduced size where the
        # crop allows (data/file_transforms.py); a full-size decode gives the Compose's tensor bit for bit
        dataset = ShardDataset if isinstance(splits, ShardSplits) else ImageFolder
        # normalize="device": uint8 images, normalised by self.pixels in on_after_batch_transfer
        train_ft = TrainFileTransform(train_tf, normalize_on=hp.normalize)
        eval_ft = EvalFileTransform(self.eval_transform(), normalize_on=hp.normalize)
        if self.collate is not None:  # NaFlex: the whole image, resized to the token budget by the collate
            train_ft = naflex_transforms(hflip=hp.hflip, color_jitter=hp.color_jitter, mean=hp.mean, std=hp.std)
            eval_ft = naflex_transforms(mean=hp.mean, std=hp.std)
        self.train_set = dataset(splits.train, splits.classes, train_ft)  # type: ignore[arg-type]
        self.val_set = dataset(splits.val, splits.classes, eval_ft)  # type: ignore[arg-type]
        if stage in (None, "fit") and hp.drop_last and len(self.train_set) < hp.batch_size and self.budget is None:
            raise ConfigError(f"data.batch_size={hp.batch_size} is larger than the {len(self.train_set)} training "
                              f"images, and data.drop_last drops the only batch: lower data.batch_size")
        if stage in (None, "fit", "validate") and not len(self.val_set):
            fix = ("pack the folder with --split all" if isinstance(splits, ShardSplits) else
                   "add a val/ folder or raise data.val_fraction")
            raise ConfigError(f"{splits.root}: no validation images; {fix}")

    def eval_transform(self):
        """The evaluation pipeline of this data module (also for checkpoints' eval and predict)."""
        hp = self.hparams
        return eval_transforms(hp.img_size, crop_pct=hp.crop_pct, mean=hp.mean, std=hp.std,
                               interpolation=hp.interpolation)

    def use_patch(self, patch: int) -> None:
        """NaFlex's patch size from the model (``train cls``): ``naflex_patch`` when it was not given;
        a different one given is refused."""
        if self.collate is None:
            return
        given = self.hparams.naflex_patch
        if given is not None and given != patch:
            raise ConfigError(f"data.naflex_patch={given}, but the model's patches are {patch} px: leave "
                              f"data.naflex_patch out (it follows the model) or set it to {patch}")
        self.hparams.naflex_patch = patch
        self.collate = NaFlexCollate(patch, self.collate.max_patches)

    def naflex_record(self, replicas: int = 1) -> dict[str, Any] | None:
        """What the run records of ``data.naflex`` (None: off): the patches per image and the patch size,
        or a token budget, its sequence lengths and its training batches per epoch at each (for a
        process's share of ``replicas``)."""
        if self.collate is None:
            return None
        if self.budget is None:
            return {"max_patches": self.hparams.naflex, "patch": self.collate.patch}
        assert self.train_set is not None, "call setup() first"
        share = -(-len(self.train_set) // replicas)
        return self.budget.record(self.collate.patch, self.budget.schedule(share, self.hparams.seed))

    # ---------------------------------------------------------------- loaders
    def train_dataloader(self) -> DataLoader:
        assert self.train_set is not None, "call setup() first"
        budget = self.budget
        return self.loader(self.train_set, self.hparams.batch_size, train=True, collate_fn=self.collate,
                           batches=None if budget is None else lambda sampler: NaFlexBatchSampler(sampler, budget))

    def val_dataloader(self) -> DataLoader:
        assert self.val_set is not None, "call setup() first"
        return self.loader(self.val_set, self.hparams.eval_batch_size or 2 * self.hparams.batch_size, train=False,
                           collate_fn=self.collate)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """A uint8 batch (``normalize="device"``) normalised where it is now, on the training device
        (a training batch augmented first under ``augment="device"``, seeded by its position: see
        :func:`~vision_attn.data.device_augment.batch_seed`); a float32 batch (normalised in the
        loader) as it is. Lightning calls this for the data module."""
        images, labels = batch
        trainer = self.trainer
        if isinstance(images, NaFlexBatch):  # normalised in the loader
            if trainer is not None:
                images = images._replace(patches=trainer.precision_plugin.convert_input(images.patches))
            return images, labels
        if self.augmenter is not None and trainer is not None and trainer.training:
            epoch, batch_index = training_position(trainer)  # of the batch in hand: it is not done yet
            seed = batch_seed(self.hparams.seed, trainer.global_rank, epoch, batch_index)
            images = self.augmenter(images, seed)
        else:
            images = self.pixels(images)
        if self.trainer is not None:  # the precision's input dtype (bf16-true, 64-true ...): what Lightning
            images = self.trainer.precision_plugin.convert_input(images)  # did to a float batch before the copy
        return images, labels
