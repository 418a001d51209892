"""What ``vision-attn explain`` asks of a classification run: the image as the network takes it (the
run's evaluation pipeline) and the top classes of its logits as the maps' targets."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from vision_attn.tasks.runs import Run
from vision_attn.tasks.task import Explain, ExplainTarget

__all__ = ["CLASSIFY_EXPLAIN"]


def _to_input(run: Run, image: np.ndarray) -> torch.Tensor:
    return run.transform(image=image)["image"].unsqueeze(0)


def _class_target(index: int, label: str) -> ExplainTarget:
    return ExplainTarget(label, index, lambda logits: logits[index])


def _targets(run: Run, logits: torch.Tensor, k: int) -> list[ExplainTarget]:
    """The ``k`` most probable classes of one image's logits (1, N), captioned ``class prob``."""
    probs = logits.detach().float().softmax(-1)[0]
    values, indices = probs.topk(max(1, min(k, probs.numel())))
    return [_class_target(int(i), f"{run.classes[int(i)]} {float(v):.2f}") for v, i in zip(values, indices)]


def _align(run: Run, target: ExplainTarget, logits: Any) -> ExplainTarget:
    """The same class on another run: its own probability in the caption."""
    prob = float(logits.detach().float().softmax(-1)[0, target.index])
    return _class_target(target.index, f"{target.label.rsplit(' ', 1)[0]} {prob:.2f}")


CLASSIFY_EXPLAIN = Explain(methods=("gradcam", "gradcam++", "eigencam", "layercam", "rollout"), to_input=_to_input,
                           output=lambda logits: logits, targets=_targets, align=_align)
