"""The keypoint (pose) LightningDataModule: detection data whose instances carry keypoints.

Everything of :class:`~vision_attn.tasks.detect.data.DetectionDataModule` (sources, augmentation, exact
resume, the mosaic switched off at the end), with items that also carry ``target["keypoints"]``
(n, K, 3) in network-input pixels, moved by every geometric augmentation and swapped by the set's
``flip_idx`` on a horizontal flip (:class:`~vision_attn.data.DetectionTransform` with
``keypoints=True``). Sources: ``demo:digit-keypoints``, a YOLO data YAML with ``kpt_shape`` (and
``flip_idx``, ``kpt_oks_sigmas``), or a COCO keypoints folder (``annotations/person_keypoints_{split}.json``).

A batch (:func:`~vision_attn.data.collate_detection`) holds ``images`` (B, 3, S, S), per image
``boxes`` (n_i, 4) xyxy, ``labels`` (n_i,) and ``keypoints`` (n_i, K, 3) in input pixels, and
``targets``, the instances flattened as ultralytics' ``v8PoseLoss`` takes them: ``batch_idx`` (N,),
``cls`` (N, 1), ``bboxes`` (N, 4) cx, cy, w, h and ``keypoints`` (N, K, 3), x and y normalised by the
input's size (:func:`~vision_attn.data.detection.yolo_targets`). The validation ground truth
(:meth:`ground_truth`) carries ``keypoints`` and ``areas`` in original pixels, what
:func:`~vision_attn.evaluation.keypoint_map` takes with :attr:`keypoint_spec`'s sigmas.
"""
from __future__ import annotations

from typing import Any

from vision_attn.data.keypoints import KeypointSpec
from vision_attn.errors import ConfigError, DataError
from vision_attn.tasks.detect.data import DetectionDataModule

__all__ = ["PoseDataModule"]


class PoseDataModule(DetectionDataModule):
    """Keypoint data for training and validation.

    Args (by keyword; :class:`~vision_attn.tasks.detect.data.DetectionDataModule`'s, whose ``data`` here
    defaults to ``demo:digit-keypoints``; ``hflip`` > 0 needs the set's ``flip_idx``).
    """

    keypoints = True

    def __init__(self, *, data: str = "demo:digit-keypoints", **kwargs: Any) -> None:
        super().__init__(data=data, **kwargs)

    def scan(self) -> "PoseDataModule":
        """:meth:`DetectionDataModule.scan`, and both splits' keypoints checked to agree."""
        first = self.train_set is None
        super().scan()
        if first:
            train, val = self.train_set.keypoint_spec, self.val_set.keypoint_spec
            if train.kpt_shape != val.kpt_shape:
                raise DataError(f"{self.hparams.data}: the train split has kpt_shape {train.kpt_shape} but val "
                                f"{val.kpt_shape}; give both splits the same keypoints")
            if self.hparams.hflip > 0 and train.flip_idx is None:
                raise ConfigError(f"data.hflip={self.hparams.hflip} with keypoints needs their flip_idx (the data "
                                  f"YAML's flip_idx: each point's mirror point); add it to {self.hparams.data} or "
                                  f"set data.hflip 0")
        return self

    @property
    def keypoint_spec(self) -> KeypointSpec:
        """The set's keypoints: ``kpt_shape``, ``flip_idx``, OKS ``sigmas``, ``names``, ``skeleton``."""
        return self.scan().train_set.keypoint_spec

    def model_fill(self) -> dict[str, Any]:
        """The classes, and the keypoints (the pose module's ``keypoints``: its head's ``kpt_shape``, the
        loss's and the evaluation's sigmas, the skeleton drawn)."""
        return {**super().model_fill(), "keypoints": self.keypoint_spec.as_dict()}

    def summary(self) -> str:
        return f"{super().summary()}; keypoints {self.keypoint_spec.kpt_shape}"
