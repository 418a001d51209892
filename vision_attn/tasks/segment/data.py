"""The segmentation LightningDataModule: detection data with instance masks.

Everything of :class:`~vision_attn.tasks.detect.data.DetectionDataModule` (sources, augmentation,
exact resume, mosaic switched off at the end), with items that also carry ``target["masks"]``: one
uint8 mask per box at ``1 / mask_ratio`` of the network input, following every geometric augmentation
(:class:`~vision_attn.data.DetectionTransform` with ``masks=True``), and a validation ground truth with
COCO RLE masks in original pixels. Sources: ``demo:digit-masks``, a YOLO data YAML whose labels are
polygons, or a COCO folder whose annotations have ``segmentation`` (polygons or RLE; ``iscrowd``
regions kept for evaluation, not trained on).
"""
from __future__ import annotations

from typing import Any, Literal

from vision_attn.errors import ConfigError
from vision_attn.tasks.detect.data import DetectionDataModule

__all__ = ["SegmentationDataModule"]


class SegmentationDataModule(DetectionDataModule):
    """Instance-segmentation data for training and validation.

    Args (beyond :class:`~vision_attn.tasks.detect.data.DetectionDataModule`'s, whose ``data`` here
    defaults to ``demo:digit-masks``):
        mask_ratio: the masks' downsampling from the input (4: the prototypes' resolution, ultralytics'
            default).
        overlap: each pixel belongs to at most one instance, the smallest (ultralytics' ``overlap_mask``).
    """

    masks = True

    def __init__(
        self,
        data: str = "demo:digit-masks",
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
        num_workers: int = 2,
        persistent_workers: bool = True,
        pin_memory: bool | None = None,
        drop_last: bool = False,
        seed: int = 0,
        mask_ratio: int = 4,
        overlap: bool = True,
    ) -> None:
        if mask_ratio not in (1, 2, 4, 8):
            raise ConfigError(f"data.mask_ratio={mask_ratio}: give 1, 2, 4 or 8 (4: the prototypes' resolution)")
        super().__init__(data=data, format=format, skip_bad_images=skip_bad_images, img_size=img_size,
                         batch_size=batch_size, eval_batch_size=eval_batch_size, mosaic=mosaic,
                         affine_scale=affine_scale, translate=translate, degrees=degrees, shear=shear, hflip=hflip,
                         vflip=vflip, hsv=hsv, min_visibility=min_visibility, num_workers=num_workers,
                         persistent_workers=persistent_workers, pin_memory=pin_memory, drop_last=drop_last, seed=seed)

    def mask_options(self) -> dict[str, Any]:
        return {"masks": True, "mask_ratio": self.hparams.mask_ratio, "overlap": self.hparams.overlap}
