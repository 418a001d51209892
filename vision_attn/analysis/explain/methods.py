"""The map methods by name, each pytorch-grad-cam's own class, and one map of one target."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from pytorch_grad_cam import EigenCAM, GradCAM, GradCAMPlusPlus, LayerCAM
from torch import nn

from vision_attn.analysis.explain.layers import TargetLayers

__all__ = ["CAM_METHODS", "METHODS", "uses_targets", "cam_map"]

CAM_METHODS: dict[str, type] = {"gradcam": GradCAM, "gradcam++": GradCAMPlusPlus, "eigencam": EigenCAM,
                                "layercam": LayerCAM}
METHODS = (*CAM_METHODS, "rollout")
"""Every method ``explain`` knows; ``rollout`` is attention rollout (ViT/DeiT classifiers)."""


def uses_targets(method: str) -> bool:
    """Whether the method's map depends on the target (EigenCAM and rollout draw one map per image)."""
    return method not in ("eigencam", "rollout")


class _Output(nn.Module):
    """``model`` with its eval output read by ``pick`` (a batch-first tensor the targets index)."""

    def __init__(self, model: nn.Module, pick: Callable[[Any], torch.Tensor]) -> None:
        super().__init__()
        self.model, self.pick = model, pick

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pick(self.model(x))


def cam_map(method: str, model: nn.Module, x: torch.Tensor, layers: TargetLayers, target: Callable[[Any], Any],
            pick: Callable[[Any], torch.Tensor] = lambda out: out) -> np.ndarray:
    """The ``method`` map (H, W) in [0, 1] of ``target`` on the input ``x`` (1, 3, H, W), read at
    ``layers``: pytorch-grad-cam's array as it computes it (its per-layer min-max scaling, layers
    averaged at input size)."""
    with CAM_METHODS[method](model=_Output(model, pick), target_layers=list(layers.modules),
                             reshape_transform=layers.reshape) as cam:
        return cam(input_tensor=x, targets=[target])[0]
