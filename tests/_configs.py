"""The tiny training configurations of the detection-like tests (det, seg, pose, obb, search, exact
resume): one YOLO run on a generated set, each test file changing a key or two."""
from __future__ import annotations

import os
from typing import Any, Mapping

import yaml

__all__ = ["tiny_detection"]


def tiny_detection(model_yaml: str | os.PathLike, root: str | os.PathLike,
                   changes: Mapping[str, Any] | None = None) -> str:
    """The text of a training config: ``model_yaml`` at scale n on the set at ``root``, 64 px, batches of 8,
    2 epochs on the CPU, a short warmup, the mosaic closed for the last epoch, 4 images in
    ``predictions.png``. ``changes``: dotted keys (``"model.plot_images"``, ``"threads"``) set to their
    values, replacing or adding (None: YAML's null)."""
    config: dict[str, Any] = {
        "model": {"yaml": str(model_yaml), "scale": "n", "warmup_epochs": 0.5, "min_warmup_steps": 1,
                  "close_mosaic": 1, "plot_images": 4},
        "data": {"data": str(root), "img_size": 64, "batch_size": 8, "num_workers": 0},
        "trainer": {"accelerator": "cpu", "max_epochs": 2},
    }
    for key, value in (changes or {}).items():
        *sections, name = key.split(".")
        node = config
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    return yaml.safe_dump(config, sort_keys=False)
