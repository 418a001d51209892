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

from typing import Any

from vision_attn.errors import ConfigError
from vision_attn.tasks.detect.data import DetectionDataModule

__all__ = ["SegmentationDataModule"]


class SegmentationDataModule(DetectionDataModule):
    """Instance-segmentation data for training and validation.

    Args (by keyword; beyond :class:`~vision_attn.tasks.detect.data.DetectionDataModule`'s, whose ``data``
    here defaults to ``demo:digit-masks``):
        mask_ratio: the masks' downsampling from the input (4: the prototypes' resolution, ultralytics'
            default).
        overlap: each pixel belongs to at most one instance, the smallest (ultralytics' ``overlap_mask``).
    """

    masks = True

    def __init__(self, *, data: str = "demo:digit-masks", mask_ratio: int = 4, overlap: bool = True,
                 **kwargs: Any) -> None:
        if mask_ratio not in (1, 2, 4, 8):
            raise ConfigError(f"data.mask_ratio={mask_ratio}: give 1, 2, 4 or 8 (4: the prototypes' resolution)")
        super().__init__(data=data, **kwargs)

    def mask_options(self) -> dict[str, Any]:
        return {"masks": True, "mask_ratio": self.hparams.mask_ratio, "overlap": self.hparams.overlap}
