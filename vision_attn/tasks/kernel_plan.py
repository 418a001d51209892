"""Which CPU kernel plan a training runs with (:mod:`vision_attn.kernels.plan`), and its record in the run folder.

The kernels round differently, so the plan is part of a run's reproducibility. A run trains with,
in this order: the plan ``--kernels`` names; the plan its run folder recorded in ``kernels.json``
(a resume, and the other processes of a multi-process run); with ``--trainer.deterministic true``
the fixed ``"aten"`` plan where the process would otherwise measure; else the process's plan
(``$VISION_ATTN_KERNELS``, measured by default). A measured plan is resolved before training (each
dtype measured, or read from the cache), so that what is recorded is what ran; a new single-process
CPU run then judges it on its own training step (:func:`judged_training_plan`): the measured choices
only where they make the step faster.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.io.json import read_json
from vision_attn.kernels import KernelPlan, current_plan, example_images, judge_plan, resolve_plan

__all__ = ["choose_kernel_plan", "read_recorded_plan", "judged_training_plan", "training_dtype"]


def read_recorded_plan(path: Path) -> KernelPlan:
    """The plan a run folder recorded in ``path``; a damaged file is a ConfigError naming it."""
    data = read_json(path, what="kernel plan", max_bytes=1 << 20, error=ConfigError)
    try:
        return KernelPlan.from_dict(data)
    except ValueError as e:
        raise ConfigError(f"kernel plan {path}: {e}; delete the file to measure the kernels again, or give "
                          "--kernels measured|aten|onednn") from None


def choose_kernel_plan(requested: str | None, deterministic: Any, recorded: Path | None) -> tuple[KernelPlan, str]:
    """The resolved plan a run trains with and why (for the progress line): ``requested`` (the
    ``kernels`` config key), ``deterministic`` (Lightning's ``trainer.deterministic``), ``recorded``
    (the run folder's ``kernels.json`` where the run continues one, else None)."""
    if requested is not None:
        plan, why = resolve_plan(requested), "--kernels"
    elif recorded is not None and recorded.is_file():
        plan, why = read_recorded_plan(recorded), f"recorded in {recorded.name}"
    elif deterministic and current_plan().name == "measured":
        plan, why = resolve_plan("aten"), "fixed: --trainer.deterministic"
    else:
        plan, why = current_plan(), "this process's plan"
    return plan.resolved(), why


def training_dtype(precision: Any) -> torch.dtype:
    """The dtype whose kernels a training at Lightning's ``precision`` runs (bf16 for ``bf16-mixed``)."""
    return torch.bfloat16 if str(precision).startswith("bf16") else torch.float32


def judged_training_plan(network: nn.Module, plan: KernelPlan, batch: int, img_size: int | tuple[int, int],
                         precision: Any) -> tuple[KernelPlan, str]:
    """The measured ``plan`` judged on ``network``'s training step at ``batch`` images of ``img_size``
    (``precision``: Lightning's; bf16 under ``bf16-mixed``), and why, for the progress line."""
    autocast = torch.bfloat16 if training_dtype(precision) == torch.bfloat16 else None
    name, judged, seconds = judge_plan(network, example_images(batch, img_size), train=True, plan=plan,
                                       autocast=autocast)
    if not seconds:
        return judged, "measured; no other kernels to judge here"
    ratio = seconds["aten"] / seconds[name] if "aten" in seconds and seconds[name] > 0 else 1.0
    return judged, f"measured, judged on this training step: {name}, {ratio:.2f}x PyTorch's kernels"
