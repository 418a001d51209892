"""Keypoints (pose): the DataModule of data with keypoints (``data``). The module, the Task record and the
run loader come with the keypoint head (the task package is assembled from both)."""
from vision_attn.tasks.pose.data import PoseDataModule

__all__ = ["PoseDataModule"]
