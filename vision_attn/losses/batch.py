"""The one call signature of every detector loss (:class:`BatchLoss`): what the detection and segmentation
LightningModules call, so that they hold no branch per loss family.

- ``network_inputs(images, batch) -> args``: what the network is called with in training (the images; an
  RT-DETR decoder also its denoising targets, made from the batch's boxes);
- ``batch_loss(preds, batch) -> parts``: the loss of the network's training output on a collated batch
  (``images`` (B, 3, H, W), per image ``boxes`` (n_i, 4) xyxy input pixels and ``labels`` (n_i,), and
  whatever else the loss names in ``batch_keys``, e.g. ``masks``); ``parts`` is a dataclass whose
  ``total`` has the gradients and whose other tensor fields are detached parts to log;
- ``sum_over_images``: whether ``total`` is a mean per image that training multiplies by the batch size
  (YOLO) or is used as it is (RT-DETR, a mean over matched boxes);
- ``start_epoch(epoch, epochs) -> {name: value}``: called at the start of each training epoch (0-based,
  of ``epochs``), the values logged as ``train/NAME``.
"""
from __future__ import annotations

from typing import Any, ClassVar, Mapping

import torch

__all__ = ["BatchLoss"]


class BatchLoss:
    """The detector-loss interface (see the module's docstring), mixed into each loss ``nn.Module``: the
    defaults call the network on the images alone and the loss on ``(preds, *batch[k] for k in
    batch_keys)``."""

    sum_over_images: ClassVar[bool] = True
    batch_keys: tuple[str, ...] = ("boxes", "labels")
    """The batch entries the loss takes after the network's output, in its ``forward``'s order."""

    def network_inputs(self, images: torch.Tensor, batch: Mapping[str, Any]) -> tuple[Any, ...]:
        """The training call's arguments of the network for ``images`` (B, 3, H, W) of ``batch``."""
        return (images,)

    def batch_loss(self, preds: Any, batch: Mapping[str, Any]) -> Any:
        """The loss and its parts for the network's training output ``preds`` on ``batch``."""
        return self(preds, *(batch[k] for k in self.batch_keys))  # type: ignore[operator]

    def start_epoch(self, epoch: int, epochs: int) -> dict[str, float]:
        """Ready the loss for training epoch ``epoch`` (0-based) of ``epochs``; the values to log."""
        return {}
