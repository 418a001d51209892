"""The keypoint (pose) LightningModule: a YOLO-style model whose last row is a ``Pose`` head (``Pose26`` for
YOLO26), trained with ultralytics' keypoint loss (the detection loss plus the OKS-based location term with
the set's sigmas and the visibility BCE; YOLO26's keypoint-aware assignment and RLE term for ``Pose26``),
or its end-to-end form for an end-to-end head (:func:`~vision_attn.losses.detector_loss` picks it).

Everything else is :class:`~vision_attn.tasks.detect.module.DetectionModule`'s: optimiser groups, the warmup
and decay, the EMA, the closing of the mosaic, exact resume. The head is built for the data's
``kpt_shape``. Validation keeps each detection's keypoints in original image pixels and computes box COCO
mAP (``val/mAP50-95``, ``val/mAP50``) and keypoint mAP by pycocotools' OKS evaluation with the set's
sigmas (``val/pose_mAP50-95``, ``val/pose_mAP50``: ultralytics' ``metrics/mAP50-95(P)``, ``mAP50(P)``);
``predictions.png`` shows the points and the skeleton.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from vision_attn.data.keypoints import default_sigmas
from vision_attn.evaluation import keypoint_map
from vision_attn.models.yolo.pose import check_kpt_shape
from vision_attn.tasks.detect.module import DetectionModule
from vision_attn.tasks.pose.plots import pose_grid
from vision_attn.tasks.pose.run import keypoints_of_batch

__all__ = ["PoseModule"]


class PoseModule(DetectionModule):
    """Images (B, 3, H, W) in [0, 1] -> detections with keypoints.

    Args: those of :class:`~vision_attn.tasks.detect.module.DetectionModule`, by keyword (``yaml`` a -pose YAML
    such as ``yolov8n-pose.yaml``; default ``yolov8-pose.yaml``), and
        keypoints: set from the data: ``kpt_shape``, ``flip_idx``, ``kpt_oks_sigmas``, ``kpt_names``,
            ``skeleton`` (:meth:`~vision_attn.data.keypoints.KeypointSpec.as_dict`); the head is built for its
            ``kpt_shape``, the loss and the keypoint mAP use its sigmas.
        pose_gain, kobj_gain: weights of the keypoint location and visibility terms (ultralytics' 12 and 1);
        rle_gain: of YOLO26's residual log-likelihood term (``Pose26`` heads).
    """

    task_name = "pose"
    default_yaml = "yolov8-pose.yaml"
    heads = ("pose",)
    of_batch = staticmethod(keypoints_of_batch)
    truth_keys = ("keypoints",)  # predictions.png shows the true points too

    def __init__(self, *, keypoints: dict[str, Any] | None = None, pose_gain: float = 12.0, kobj_gain: float = 1.0,
                 rle_gain: float = 1.0, **kwargs: Any) -> None:
        self._keypoints = dict(keypoints or {})  # read by network_options / build_criterion in the parent's __init__
        self._pose_gains = {"pose_gain": pose_gain, "kobj_gain": kobj_gain, "rle_gain": rle_gain}
        super().__init__(**kwargs)
        self.last_pose_report: Any = None  # the last validation's keypoint_map result

    @property
    def sigmas(self) -> list[float] | None:
        """The set's OKS sigmas (None: the loss's and the evaluation's default for ``kpt_shape``)."""
        return list(self._keypoints.get("kpt_oks_sigmas") or []) or None

    def network_options(self) -> dict[str, Any]:
        shape = self._keypoints.get("kpt_shape")
        return {"kpt_shape": list(check_kpt_shape(tuple(shape)))} if shape is not None else {}

    def wrong_head(self) -> str:
        return (f"model.yaml={self.yaml_source}: its last row is {type(self.model.model[-1]).__name__}, not a Pose "
                f"head; train pose takes a -pose YAML (yolov8n-pose.yaml, yolo11n-pose.yaml, ...)")

    def build_criterion(self, e2e_weights: str, **gains: float) -> nn.Module:
        return super().build_criterion(e2e_weights, kpt_sigmas=self.sigmas, **self._pose_gains, **gains)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["model_yaml"]["kpt_shape"] = list(self.model.model[-1].kpt_shape)  # the data's, not the YAML's

    # ---------------------------------------------------------------- validation
    def prediction_grid(self, images, predictions, truths, names):  # type: ignore[override]
        return pose_grid(images, predictions, truths, names, skeleton=self._keypoints.get("skeleton") or ())

    def sample_prediction(self, det: dict[str, Any]) -> dict[str, Any]:
        return {**super().sample_prediction(det), "keypoints": det["input_keypoints"], "size": det["input_size"]}

    def evaluate(self, truth: list[dict[str, Any]], dets: list[dict[str, Any]], category_ids: list[int]
                 ) -> dict[str, float]:
        """Box mAP (:attr:`last_report`) and keypoint mAP (:attr:`last_pose_report`) of one validation."""
        metrics = super().evaluate(truth, dets, category_ids)
        sigmas = self.sigmas or default_sigmas(*self.model.model[-1].kpt_shape)
        report = keypoint_map(truth, dets, names=self.class_names, category_ids=category_ids, sigmas=sigmas)
        self.last_pose_report = report
        return {**metrics, "val/pose_mAP50-95": float(report.map), "val/pose_mAP50": float(report.map50)}
