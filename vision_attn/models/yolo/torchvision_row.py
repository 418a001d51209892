"""ultralytics' ``TorchVision`` row (yolo11-cls-resnet18.yaml): a torchvision ResNet as one row.

``[-1, 1, TorchVision, [c2, model, weights, unwrap, truncate, split]]``: ``model`` one of the
torchvision ResNets vision_attn registers (``resnet18`` ... ``resnet152``, built by
:func:`vision_attn.create_model`, which is torchvision's ResNet module for module); ``unwrap``
(default true): its children as one ``nn.Sequential`` (``m.0`` = conv1, ``m.1`` = bn1, ..., ``m.7`` =
layer4, the keys of ultralytics' row) without the last ``truncate`` (default 2: the pooling and the
classifier); ``unwrap: false``: the whole network, classifier replaced by the identity. ``split`` (a
list of every child's output) is not supported. ``c2`` must equal the output channels (checked).

``weights``: nothing is downloaded. ``null`` (or ``False``): random weights; a path to a local weights
file: loaded (torchvision's or timm's layout); any other string (``DEFAULT``, ``IMAGENET1K_V1``: the
names of torchvision's downloadable weights) builds random weights: load trained weights afterwards
(a run's checkpoint, or ``yaml insert --checkpoint``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.registry import create_model

__all__ = ["TorchVision", "TORCHVISION_ROW_MODELS"]

TORCHVISION_ROW_MODELS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")
"""The networks a TorchVision row may name."""


class TorchVision(nn.Module):
    """A torchvision ResNet, unwrapped and truncated: (B, c1, H, W) -> (B, C, H/32, W/32) (truncate 2)."""

    def __init__(self, model: str, weights: Any = "DEFAULT", unwrap: bool = True, truncate: int = 2,
                 split: bool = False, *, in_channels: int = 3) -> None:
        super().__init__()
        if model not in TORCHVISION_ROW_MODELS:
            raise ConfigError(f"TorchVision: model {model!r} is not one of {', '.join(TORCHVISION_ROW_MODELS)}")
        if split:
            raise ConfigError("TorchVision: split: true (a list of every child's output) is not supported; write "
                              "false")
        if not isinstance(truncate, int) or isinstance(truncate, bool) or not 0 <= truncate < 9:
            raise ConfigError(f"TorchVision: truncate {truncate!r} must be a whole number of trailing children, 0 to 8")
        if in_channels != 3:
            raise ConfigError(f"TorchVision: {model} takes 3-channel images, the row's input has {in_channels}")
        local = isinstance(weights, str) and Path(weights).is_file()
        net = create_model(model, pretrained=weights if local else None)
        if unwrap:
            children = list(net.children())
            self.m: nn.Module = nn.Sequential(*(children[:-truncate] if truncate else children))
        else:
            net.fc = nn.Identity()
            self.m = net
        self.out_channels = _out_channels(self.m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.m(x)


def _out_channels(m: nn.Module) -> int:
    """Channels of ``m``'s output, from a forward on the meta device with its tensors swapped for meta
    tensors of their shapes (no arithmetic; ``m`` is unchanged)."""
    x = torch.zeros(1, 3, 64, 64, device="meta")
    tensors = {k: torch.empty_like(v, device="meta") for k, v in m.state_dict().items()}
    was_training = m.training
    try:
        with torch.no_grad():
            out = torch.func.functional_call(m.eval(), tensors, (x,))
    finally:
        m.train(was_training)
    return int(out.shape[1])
