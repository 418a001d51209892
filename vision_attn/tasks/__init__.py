"""Training with PyTorch Lightning: the classification and detection modules and data modules, the
configuration, the run folder, and loading a trained run for evaluation and prediction."""
from vision_attn.tasks.classification import ClassificationModule
from vision_attn.tasks.config import dump_config, parse_train_config
from vision_attn.tasks.datamodule import ClassificationDataModule
from vision_attn.tasks.det_datamodule import DetectionDataModule
from vision_attn.tasks.det_inference import Detector, evaluate_detector, load_detector, predict_detections
from vision_attn.tasks.det_train import train_detector
from vision_attn.tasks.detection import DetectionModule
from vision_attn.tasks.inference import Classifier, evaluate_classifier, load_classifier, predict_images
from vision_attn.tasks.run_folder import RunFolder
from vision_attn.tasks.train import TrainResult, train_classifier

__all__ = ["ClassificationModule", "ClassificationDataModule", "parse_train_config", "dump_config", "RunFolder",
           "TrainResult", "train_classifier", "Classifier", "load_classifier", "evaluate_classifier",
           "predict_images", "DetectionModule", "DetectionDataModule", "train_detector", "Detector",
           "load_detector", "evaluate_detector", "predict_detections"]
