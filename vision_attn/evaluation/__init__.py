"""Evaluation of detections: COCO box and mask mAP on per-image box lists (pycocotools or faster-coco-eval),
keypoint mAP (pycocotools' OKS with the set's sigmas) and oriented-box mAP (COCO's averaging over the
exact rotated IoU). Imports only torch, numpy and the COCO libraries, never Lightning."""
from vision_attn.evaluation.coco import CocoResult, check_category_mapping, coco_map
from vision_attn.evaluation.keypoints import keypoint_map
from vision_attn.evaluation.obb import obb_map
from vision_attn.evaluation.rotated_iou import rotated_iou

__all__ = ["CocoResult", "check_category_mapping", "coco_map", "keypoint_map", "obb_map", "rotated_iou"]
