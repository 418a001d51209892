"""Run folders as a finished training leaves them, without training: ``metrics.json`` alone, with the keys
the trainer writes (tests/test_cli_train_pose_obb.py checks that a real pose run has each of them)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def pose_metrics(name: str, box: float, keypoint: float, **more: Any) -> dict[str, Any]:
    """A pose run's ``metrics.json`` (``vision-attn train pose``): box mAP ``box``, keypoint mAP ``keypoint``."""
    return {"name": name, "task": "pose", "model": "yolov8-pose.yaml", "scale": "n", "img_size": 160,
            "epochs": 14, "val_map": box, "val_map50": min(1.0, box + 0.2), "val_pose_map": keypoint,
            "val_pose_map50": min(1.0, keypoint + 0.2), "best_val_pose_map": keypoint, "params": 3_289_964,
            "gflops": 9.2, "fit_time_s": 60.0, **more}


def write_run(folder: Path, metrics: dict[str, Any]) -> Path:
    """The run folder ``folder`` with ``metrics`` as its metrics.json."""
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return folder
