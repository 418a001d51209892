"""Oriented boxes (OBB): the DataModule of data with oriented boxes (``data``). The module, the Task record
and the run loader come with the OBB head (the task package is assembled from both)."""
from vision_attn.tasks.obb.data import OBBDataModule

__all__ = ["OBBDataModule"]
