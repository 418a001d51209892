"""Keypoints (pose): the LightningModule (``module``), the DataModule of data with keypoints (``data``),
training end to end (``fit``), its figures (``plots``) and loading a trained run (``run``). Built on the
detection task: a keypoint model is a detector whose head also predicts each instance's points."""
from vision_attn.tasks.pose.data import PoseDataModule
from vision_attn.tasks.pose.fit import POSE, train_pose
from vision_attn.tasks.pose.module import PoseModule
from vision_attn.tasks.pose.run import evaluate_pose, load_pose, predict_keypoint_video, predict_keypoints

__all__ = ["PoseModule", "PoseDataModule", "POSE", "train_pose", "load_pose", "evaluate_pose", "predict_keypoints",
           "predict_keypoint_video"]
