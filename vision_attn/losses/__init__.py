"""The anchor-free YOLOv8 detection loss: task-aligned assigner, box geometry (CIoU through
``torchvision.ops``), distribution focal loss, :class:`DetectionLoss` that combines them, and :class:`EndToEndLoss` for the
one-to-many and one-to-one branches of an end-to-end (NMS-free) head, :class:`SegmentationLoss` (the mask term over prototypes x coefficients),
:class:`PoseLoss` (OKS-based keypoint and visibility terms; :class:`Pose26Loss`, YOLO26's, adds keypoint-aware assignment and
the residual log-likelihood term) and :class:`OBBLoss` (ProbIoU, DFL and angle terms on rotated boxes, with
:class:`RotatedTaskAlignedAssigner`; rotated-box geometry and rotated NMS in :mod:`vision_attn.models.yolo.rotated`);
:class:`RTDETRLoss`, RT-DETR's set loss (:class:`HungarianMatcher`; varifocal, L1 + GIoU, auxiliary and denoising terms). Every
detector loss (:func:`detector_loss` picks a network's) has the one call signature of :class:`BatchLoss` (``network_inputs``, ``batch_loss``,
``start_epoch``, ``sum_over_images``)."""
from vision_attn.losses.assigner import Assignment, TaskAlignedAssigner, anchors_in_boxes
from vision_attn.losses.batch import BatchLoss
from vision_attn.losses.boxes import box_to_dist, ciou, dist_to_box
from vision_attn.losses.detection import DetectionLoss, LossParts, pad_targets
from vision_attn.losses.dfl import distribution_focal_loss
from vision_attn.losses.segmentation import SegmentationLoss, SegmentationParts
from vision_attn.losses.detr import DETRLossParts, RTDETRLoss, detr_targets
from vision_attn.losses.matcher import HungarianMatcher, Matches
from vision_attn.losses.end_to_end import YOLO26_WEIGHTS, YOLOV10_WEIGHTS, BranchWeights, EndToEndLoss
from vision_attn.models.yolo.rotated import box_corners, pairwise_probiou, probiou, rotated_nms, rotated_to_dist
from vision_attn.losses.rotated_assigner import RotatedTaskAlignedAssigner
from vision_attn.losses.obb import OBBLoss, OBBParts
from vision_attn.losses.keypoints import PoseLoss, PoseParts, keypoint_sigmas, oks_term
from vision_attn.losses.keypoint_assigner import KeypointTaskAlignedAssigner
from vision_attn.losses.rle import RLE_WEIGHTS, Pose26Loss, Pose26Parts, rle_term
from vision_attn.losses.select import LOSS_OF_HEAD, detector_loss

__all__ = ["BatchLoss", "Assignment", "TaskAlignedAssigner", "anchors_in_boxes", "box_to_dist", "ciou", "dist_to_box",
           "DetectionLoss", "LossParts", "pad_targets", "distribution_focal_loss", "BranchWeights", "EndToEndLoss",
           "YOLO26_WEIGHTS", "YOLOV10_WEIGHTS", "SegmentationLoss", "SegmentationParts",
           "DETRLossParts", "RTDETRLoss", "detr_targets", "HungarianMatcher", "Matches",
           "detector_loss", "LOSS_OF_HEAD", "box_corners", "pairwise_probiou", "probiou", "rotated_nms",
           "rotated_to_dist", "RotatedTaskAlignedAssigner", "OBBLoss", "OBBParts",
           "PoseLoss", "PoseParts", "keypoint_sigmas", "oks_term", "KeypointTaskAlignedAssigner",
           "RLE_WEIGHTS", "Pose26Loss", "Pose26Parts", "rle_term"]
