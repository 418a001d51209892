"""Convolution and batch norm folded into one convolution for inference, as ultralytics' ``fuse()``
does before it predicts: y = gamma * (W x - mean) / sqrt(var + eps) + beta is the convolution with
weights ``W * gamma / sqrt(var + eps)`` and bias ``beta - mean * gamma / sqrt(var + eps)``
(:func:`torch.nn.utils.fusion.fuse_conv_bn_eval`). One pass of batch norm less per convolution; the
outputs agree with the unfused model's to float32 rounding (about 1e-6 relative)."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

__all__ = ["fuse_conv_bn"]


@torch.no_grad()
def fuse_conv_bn(model: nn.Module) -> nn.Module:
    """Fold every batch norm that directly follows a bias-free convolution in the same module (``conv``
    then ``bn`` attributes, as :class:`~vision_attn.models.yolo.conv.Conv` has) into that convolution,
    in place; the batch norm becomes an ``nn.Identity``. For an eval-mode model only (training would
    need the batch statistics): a model in training mode is a ValueError."""
    if model.training:
        raise ValueError("fuse_conv_bn folds the running statistics of an eval-mode model; call model.eval() first")
    for module in model.modules():
        conv, bn = getattr(module, "conv", None), getattr(module, "bn", None)
        if isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d) and bn.track_running_stats:
            module.conv = fuse_conv_bn_eval(conv, bn)
            module.bn = nn.Identity()
    return model
