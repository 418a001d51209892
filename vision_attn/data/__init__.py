"""Data: image folders (classification) and their tar shards, COCO json and YOLO txt detection sets,
albumentations pipelines, the built-in demo data sets, and DataLoader helpers. Nothing here imports Lightning."""
import os

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # before albumentations is imported: no network check

from vision_attn.data.coco import CocoDetection  # noqa: E402
from vision_attn.data.demo import DEMO_DATASETS, cache_dir, is_demo, materialise, resolve_root  # noqa: E402
from vision_attn.data.det_source import open_detection  # noqa: E402
from vision_attn.data.det_transforms import DetectionTransform, letterbox_params  # noqa: E402
from vision_attn.data.faults import Faults, Problem, walk_images  # noqa: E402
from vision_attn.data.detection import (  # noqa: E402
    DetectionDataset,
    DetectionRecord,
    DetectionStats,
    collate_detection,
)
from vision_attn.data.digit_boxes import DigitBoxesConfig, generate_digit_boxes, write_digit_boxes  # noqa: E402
from vision_attn.data.digit_masks import write_digit_masks  # noqa: E402
from vision_attn.data.folder import (  # noqa: E402
    IMAGE_EXTENSIONS,
    image_paths,
    FolderScan,
    ImageFolder,
    load_image,
    scan_folder,
    split_samples,
)
from vision_attn.data.loader import end_loader_workers, seed_worker, unwrap_worker_error  # noqa: E402
from vision_attn.data.splits import ClassificationSplits, load_splits  # noqa: E402
from vision_attn.data.transforms import IMAGENET_MEAN, IMAGENET_STD, eval_transforms, train_transforms  # noqa: E402
from vision_attn.data.yolo_txt import YoloDetection  # noqa: E402
from vision_attn.data.check import DataCheck, check_data  # noqa: E402
from vision_attn.data.shards import ShardDataset, ShardSplits, is_shard_set, open_shards, pack_shards  # noqa: E402

__all__ = [
    "DEMO_DATASETS", "cache_dir", "is_demo", "materialise", "resolve_root", "IMAGE_EXTENSIONS", "image_paths", "FolderScan",
    "ImageFolder", "load_image", "scan_folder", "split_samples", "seed_worker",
    "unwrap_worker_error", "end_loader_workers", "ClassificationSplits", "load_splits", "IMAGENET_MEAN", "IMAGENET_STD",
    "eval_transforms", "train_transforms", "CocoDetection", "YoloDetection", "open_detection", "DetectionTransform",
    "letterbox_params", "DetectionDataset", "DetectionRecord", "DetectionStats", "collate_detection",
    "DigitBoxesConfig", "generate_digit_boxes", "write_digit_boxes", "write_digit_masks", "Faults", "Problem", "walk_images",
    "check_data", "DataCheck", "pack_shards", "open_shards", "is_shard_set", "ShardSplits", "ShardDataset",
]
