"""torch's optimizers by name, and :func:`build_optimizer`, which training
(:mod:`vision_attn.tasks.optim`) and the timed training steps of :mod:`vision_attn.analysis.benchmark`
build them with: its fused step where it applies. It depends on torch alone, so every layer may use it."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Literal

import torch

__all__ = ["OPTIMIZERS", "FUSED_DEVICES", "STEP_KEYS", "fused_step_applies", "build_optimizer"]

OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
"""torch's optimisers by name: what a timed training step can end with (learning rate 1e-4, PyTorch's defaults
otherwise), and what the trainers build (:func:`build_optimizer`)."""

FUSED_DEVICES = ("cpu", "cuda")
"""Where torch's fused AdamW and SGD kernels run."""

STEP_KEYS = ("fused", "foreach")
"""The param-group keys that choose how torch's optimizers compute the step, not what they compute."""


def fused_step_applies(groups: Iterable[dict[str, Any]], clips_under_autocast: bool = False) -> bool:
    """Whether torch's fused step (one kernel over all parameters) can take the groups: every parameter
    floating point on a device of :data:`FUSED_DEVICES`, and no gradient clipping under Lightning's
    mixed precision (``clips_under_autocast``), which refuses to clip for an optimizer that unscales
    gradients itself, as fused ones do (also in ``bf16-mixed``)."""
    params = [p for g in groups for p in g["params"]]
    return (not clips_under_autocast and bool(params)
            and all(p.device.type in FUSED_DEVICES and p.is_floating_point() for p in params))


def build_optimizer(name: Literal["adamw", "sgd"], groups: list[dict[str, Any]], *,
                    clips_under_autocast: bool = False, **hyper: Any) -> torch.optim.Optimizer:
    """torch's ``name`` optimizer over ``groups`` with ``hyper`` (``lr``, ``betas``, ``momentum``, ...):
    its fused step where :func:`fused_step_applies`, else torch's default. The update is the same,
    rounding aside; on the CPU, where torch's default is a loop over the parameters, the fused AdamW
    step is 3-6x faster (its multi-tensor step is no faster than the loop there; docs/training.md,
    "The optimizer step")."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer {name!r}: choose one of {', '.join(OPTIMIZERS)}")
    fused = fused_step_applies(groups, clips_under_autocast)
    optimizer = OPTIMIZERS[name](groups, **hyper, **({"fused": True} if fused else {}))
    optimizer.register_load_state_dict_pre_hook(_keep_own_step)
    return optimizer


def _keep_own_step(optimizer: torch.optim.Optimizer, state_dict: dict[str, Any]) -> dict[str, Any]:
    """A resumed optimizer state keeps the step this optimizer was built with: a checkpoint written
    with torch's default step (before the fused one, or on another machine) resumes fused, and a
    fused one resumes where Lightning would refuse to clip for it (a run continued under mixed
    precision) with torch's default step. Runs before the state's tensors are placed, which follows
    these keys."""
    groups = [{**saved, **{k: own.get(k) for k in STEP_KEYS}}
              for saved, own in zip(state_dict["param_groups"], optimizer.param_groups)]
    return {**state_dict, "param_groups": groups + state_dict["param_groups"][len(groups):]}
