"""Image classification: the LightningModule (``module``), the DataModule of image folders (``data``),
training end to end (``fit``), its figures (``plots``) and loading a trained run (``run``)."""
from vision_attn.tasks.classify.data import ClassificationDataModule
from vision_attn.tasks.classify.fit import CLASSIFY, train_classifier
from vision_attn.tasks.classify.module import ClassificationModule
from vision_attn.tasks.classify.run import evaluate_classifier, load_classifier, predict_images, predict_classification_video

__all__ = ["ClassificationModule", "ClassificationDataModule", "CLASSIFY", "train_classifier", "load_classifier",
           "evaluate_classifier", "predict_images", "predict_classification_video"]
