"""Training with PyTorch Lightning, one package per task (``classify``, ``detect``, ``segment``, ``pose``, ``obb``: the same file
names in each) over a shared runner (``runner``, ``config``, ``run_folder``, ``checkpoint_io``), the
task registry (``registry``) and the one loader of trained runs (:func:`load_run`)."""
from vision_attn.tasks.classify import (ClassificationDataModule, ClassificationModule, evaluate_classifier,
                                        load_classifier, predict_classification_video, predict_images,
                                        train_classifier)
from vision_attn.tasks.detect import (DetectionDataModule, DetectionModule, evaluate_detector, load_detector,
                                      predict_detection_video, predict_detections, train_detector)
from vision_attn.tasks.segment import (SegmentationDataModule, SegmentationModule, evaluate_segmenter,
                                       load_segmenter, predict_segment_video, predict_segments, train_segmenter)
from vision_attn.tasks.pose import PoseDataModule, PoseModule, evaluate_pose, load_pose, predict_keypoints, train_pose
from vision_attn.tasks.obb import OBBDataModule, OBBModule, evaluate_obb, load_obb, predict_rotated, train_obb
from vision_attn.tasks.registry import TASKS, dump_config, get_task, load_run, parse_train_config, register_task, train
from vision_attn.tasks.run_folder import RunFolder
from vision_attn.tasks.runner import TrainResult
from vision_attn.tasks.runs import Run
from vision_attn.tasks.stream import StreamResult

__all__ = ["ClassificationModule", "ClassificationDataModule", "parse_train_config", "dump_config", "RunFolder",
           "TrainResult", "train_classifier", "load_classifier", "evaluate_classifier", "predict_images", "predict_classification_video",
           "DetectionModule", "DetectionDataModule", "train_detector", "load_detector", "evaluate_detector",
           "predict_detections", "predict_detection_video", "SegmentationModule", "SegmentationDataModule",
           "train_segmenter", "load_segmenter", "evaluate_segmenter", "predict_segments", "predict_segment_video", "PoseModule", "PoseDataModule", "train_pose", "load_pose", "evaluate_pose",
           "predict_keypoints", "OBBModule", "OBBDataModule", "train_obb", "load_obb", "evaluate_obb", "predict_rotated",
           "TASKS", "get_task", "register_task", "train", "load_run", "Run", "StreamResult"]
