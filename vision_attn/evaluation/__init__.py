"""Evaluation of detections: COCO box mAP on per-image box lists (pycocotools or faster-coco-eval).
Imports only torch, numpy and the COCO libraries, never Lightning."""
from vision_attn.evaluation.coco import CocoResult, check_category_mapping, coco_map

__all__ = ["CocoResult", "check_category_mapping", "coco_map"]
