"""Oriented boxes (OBB): the LightningModule (``module``), the DataModule of data with rotated boxes
(``data``), training end to end (``fit``), its figures (``plots``) and loading a trained run (``run``).
Built on the detection task: an oriented-box model is a detector whose head also predicts each box's angle."""
from vision_attn.tasks.obb.data import OBBDataModule
from vision_attn.tasks.obb.fit import OBB_TASK, train_obb
from vision_attn.tasks.obb.module import OBBModule
from vision_attn.tasks.obb.run import evaluate_obb, load_obb, predict_rotated, predict_rotated_video

__all__ = ["OBBModule", "OBBDataModule", "OBB_TASK", "train_obb", "load_obb", "evaluate_obb", "predict_rotated",
           "predict_rotated_video"]
