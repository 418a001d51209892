"""torchvision's ResNet with timm's model interface.

:class:`ResNet` is ``torchvision.models.ResNet`` (the same modules, state-dict keys and outputs, so
torchvision's and timm's ResNet files load) with :class:`~vision_attn.models.contract.TimmContract`:
five feature levels as timm's ResNets have them (the stem after its ReLU at stride 2, then
``layer1..layer4`` at strides 4 to 32), ``forward_features`` (the last map, before pooling),
``forward_head``, ``num_classes``, ``num_features``, ``reset_classifier`` (with timm's ``global_pool``:
``"avg"``, or ``""`` for the unpooled map) and gradient checkpointing of every residual block.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck
from torchvision.models.resnet import ResNet as TorchvisionResNet

from vision_attn.errors import ConfigError
from vision_attn.models.contract import TimmContract, run_blocks

__all__ = ["ResNet", "BasicBlock", "Bottleneck"]

_LAYERS = ("layer1", "layer2", "layer3", "layer4")


class ResNet(TimmContract, TorchvisionResNet):
    """torchvision's ResNet (``block``, ``layers`` and its keyword arguments: ``num_classes``,
    ``zero_init_residual``, ``groups``, ``width_per_group``, ``replace_stride_with_dilation``,
    ``norm_layer``); images (B, 3, H, W) of any size -> logits (B, num_classes)."""

    classifier_keys = ("fc.weight", "fc.bias")

    def __init__(self, block: type[BasicBlock | Bottleneck], layers: Sequence[int], **kwargs: Any) -> None:
        super().__init__(block, list(layers), **kwargs)
        self.num_classes = self.fc.out_features
        self.num_features = self.fc.in_features
        self.grad_checkpointing = False
        self.global_pool = "avg"
        dilated = list(kwargs.get("replace_stride_with_dilation") or (False, False, False))
        self.feature_info = [dict(num_chs=self.conv1.out_channels, reduction=2, module="relu")]
        reduction = 4
        for i, name in enumerate(_LAYERS):
            if i > 0 and not dilated[i - 1]:
                reduction *= 2
            self.feature_info.append(dict(num_chs=64 * 2**i * block.expansion, reduction=reduction, module=name))

    def get_classifier(self) -> nn.Module:
        return self.fc

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A new ``fc`` for ``num_classes`` (torchvision's initialisation); 0: none, the model then
        returns the pooled features (B, num_features). As timm's, ``global_pool`` replaces the pooling
        (None keeps it): ``"avg"``, or ``""``, no pooling, and with no classifier the model returns the
        last map (B, num_features, H/32, W/32)."""
        if global_pool is not None:
            if global_pool not in ("avg", ""):
                raise ConfigError(f"global_pool={global_pool!r}: choose 'avg' or '' (no pooling)")
            self.global_pool = global_pool
        if num_classes > 0 and not self.global_pool:
            raise ConfigError("reset_classifier: a classifier needs pooled features; with global_pool='' give num_classes=0")
        self.num_classes = num_classes
        device = self.conv1.weight.device
        self.fc = nn.Linear(self.num_features, num_classes, device=device) if num_classes > 0 else nn.Identity()

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, 3, H, W) -> the last map (B, num_features, H/32, W/32), before pooling."""
        for i in range(len(self._levels())):
            x = self._run_level(i, x, None)
        return x

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Map (B, C, h, w) -> logits (B, num_classes), or the pooled features (B, C) with ``pre_logits``
        (``global_pool=""``: the map as it is)."""
        if self.global_pool:
            x = torch.flatten(self.avgpool(x), 1)
        return x if pre_logits else self.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    # ---------------------------------------------------------------- timm's contract: stem, then four stages
    def _levels(self) -> list[nn.Module]:
        return [self.relu, *(getattr(self, name) for name in _LAYERS)]

    def _begin(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return x, None

    def _run_level(self, i: int, x: torch.Tensor, context: None) -> torch.Tensor:
        if i == 0:
            return self.relu(self.bn1(self.conv1(x)))
        if i == 1:
            x = self.maxpool(x)
        stage = getattr(self, _LAYERS[i - 1])
        return run_blocks(self, stage, x) if isinstance(stage, nn.Sequential) else stage(x)  # pruned: identity

    def _feature_map(self, i: int, x: torch.Tensor, context: None, norm: bool, output_fmt: str) -> torch.Tensor:
        return x

    def _end(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def _truncate(self, last: int) -> None:
        """Stages after ``last`` become identities (the level count stays five, as in timm's ResNet)."""
        for name in _LAYERS[last:]:
            setattr(self, name, nn.Identity())

    def _prune_norm(self) -> None:
        """A ResNet has no final norm."""
