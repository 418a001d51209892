"""Classification data: image folders (scan, checks, decoding), albumentations pipelines, the built-in
demo data sets, and DataLoader helpers. Nothing here imports Lightning."""
import os

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # before albumentations is imported: no network check

from vision_attn.data.demo import DEMO_DATASETS, cache_dir, is_demo, materialise, resolve_root  # noqa: E402
from vision_attn.data.folder import (  # noqa: E402
    IMAGE_EXTENSIONS,
    FolderScan,
    ImageFolder,
    check_images,
    load_image,
    scan_folder,
    split_samples,
)
from vision_attn.data.loader import seed_worker, unwrap_worker_error  # noqa: E402
from vision_attn.data.splits import ClassificationSplits, load_splits  # noqa: E402
from vision_attn.data.transforms import IMAGENET_MEAN, IMAGENET_STD, eval_transforms, train_transforms  # noqa: E402

__all__ = [
    "DEMO_DATASETS", "cache_dir", "is_demo", "materialise", "resolve_root", "IMAGE_EXTENSIONS", "FolderScan",
    "ImageFolder", "check_images", "load_image", "scan_folder", "split_samples", "seed_worker",
    "unwrap_worker_error", "ClassificationSplits", "load_splits", "IMAGENET_MEAN", "IMAGENET_STD",
    "eval_transforms", "train_transforms",
]
