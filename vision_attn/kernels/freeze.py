"""A model readied for inference on the CPU once, instead of in every call: :func:`freeze`.

What OpenVINO does when it compiles a model, and PyTorch's eager mode does in every call, done once:
the weights cast to the inference precision (bf16 autocast casts every weight in every call), and
every :class:`~vision_attn.kernels.linear.FusedLinear` keeping its weight in oneDNN's blocked layout
(the matmul primitive otherwise reorders it in every call; Swin's qkv projection also keeps its
per-head row order). The model stays an ``nn.Module`` with the same state-dict keys; the packed
copies are plain attributes, made at the first call and again whenever a weight changes.
"""
from __future__ import annotations

import torch
from torch import nn

from vision_attn.kernels.fast_paths import accelerate, needs_kernels
from vision_attn.kernels.plan import current_plan
from vision_attn.kernels.linear import FusedLinear

__all__ = ["freeze"]


def freeze(model: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """``model`` (in place, and returned) on the fast paths (:func:`~vision_attn.kernels.accelerate`) in
    eval mode without gradients, its parameters and floating buffers in ``dtype`` (None: as they are),
    its fused linear layers frozen. Its inputs must then be
    in ``dtype`` too (``model(x.to(dtype))``); bf16 computes everything in bfloat16, as OpenVINO's
    ``bf16`` hint does, where autocast keeps some ops and the residual stream in float32."""
    accelerate(model, kernels=needs_kernels(current_plan(), dtype or torch.float32)).eval().requires_grad_(False)
    if dtype is not None:
        model.to(dtype)
    for module in model.modules():
        if isinstance(module, FusedLinear):
            module.freeze()
    return model
