"""Object detection: the LightningModule (``module``), the DataModule of COCO/YOLO data (``data``),
training end to end (``fit``), its figures (``plots``), the learning-rate schedule (``schedule``),
loading a trained run (``run``) and editing a detector YAML with its checkpoint (``edit``)."""
from vision_attn.tasks.detect.data import DetectionDataModule
from vision_attn.tasks.detect.edit import DetectorYamlEdit, edit_detector_yaml
from vision_attn.tasks.detect.fit import DETECT, train_detector
from vision_attn.tasks.detect.module import DetectionModule
from vision_attn.tasks.detect.run import evaluate_detector, load_detector, predict_detections, predict_detection_video

__all__ = ["DetectionModule", "DetectionDataModule", "DETECT", "train_detector", "load_detector",
           "evaluate_detector", "predict_detections", "predict_detection_video", "DetectorYamlEdit", "edit_detector_yaml"]
