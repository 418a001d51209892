"""Instance segmentation: the LightningModule (``module``), the DataModule of data with masks (``data``),
training end to end (``fit``), its figures (``plots``) and loading a trained run (``run``). Built on
the detection task: a segmentation model is a detector whose head also predicts masks."""
from vision_attn.tasks.segment.data import SegmentationDataModule
from vision_attn.tasks.segment.fit import SEGMENT, train_segmenter
from vision_attn.tasks.segment.module import SegmentationModule
from vision_attn.tasks.segment.run import evaluate_segmenter, load_segmenter, predict_segment_video, predict_segments

__all__ = ["SegmentationModule", "SegmentationDataModule", "SEGMENT", "train_segmenter", "load_segmenter",
           "evaluate_segmenter", "predict_segments", "predict_segment_video"]
