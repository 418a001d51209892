"""The anchor-free YOLOv8 detection loss: task-aligned assigner, box geometry (CIoU through
``torchvision.ops``), distribution focal loss, and :class:`DetectionLoss` that combines them."""
from vision_attn.losses.assigner import Assignment, TaskAlignedAssigner, anchors_in_boxes
from vision_attn.losses.boxes import box_to_dist, ciou, dist_to_box
from vision_attn.losses.detection import DetectionLoss, LossParts, pad_targets
from vision_attn.losses.dfl import distribution_focal_loss

__all__ = ["Assignment", "TaskAlignedAssigner", "anchors_in_boxes", "box_to_dist", "ciou", "dist_to_box",
           "DetectionLoss", "LossParts", "pad_targets", "distribution_focal_loss"]
