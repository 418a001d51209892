"""Finished-looking run folders for the report tests: metrics.json, config.yaml, a CSV log and the figures a
classification run writes (a confusion matrix, and a predictions picture of noise: the hardest to compress)."""
from __future__ import annotations

import functools
import io
import json
from pathlib import Path

import numpy as np
import yaml
from PIL import Image


@functools.lru_cache(maxsize=1)
def _pictures() -> tuple[bytes, bytes]:
    """A confusion-matrix-like PNG (10 x 10 cells, 600 px) and a predictions-sized PNG of noise."""
    rng = np.random.default_rng(0)
    cells = rng.integers(0, 255, (10, 10), dtype=np.uint8).repeat(60, 0).repeat(60, 1)
    out = []
    for array in (np.stack([255 - cells, 255 - cells // 2, np.full_like(cells, 255)], -1),
                  rng.integers(0, 255, (640, 640, 3), dtype=np.uint8)):
        buf = io.BytesIO()
        Image.fromarray(array).save(buf, format="PNG")
        out.append(buf.getvalue())
    return out[0], out[1]


def fake_run(folder: Path, *, top1: float, seed: int = 0, lr: float = 0.01, epochs: int = 3,
             params: int = 801_034, gmacs: float = 0.0138) -> Path:
    """``folder`` laid out as a finished classification run of 10 classes."""
    (folder / "csv").mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps({
        "name": folder.name, "model": "vit_tiny_patch16_224", "img_size": 32, "epochs": epochs, "params": params,
        "gmacs": gmacs, "val_top1": top1, "val_top5": 1.0, "val_loss": 1 - top1, "best_val_top1": top1,
        "fit_time_s": 10.0 + seed}))
    (folder / "config.yaml").write_text(yaml.safe_dump({"name": folder.name, "model": {"lr": lr, "seed": seed},
                                                        "trainer": {"max_epochs": epochs}}))
    lines = ["epoch,step,train/loss_epoch,val/loss,val/top1,val/top5"]
    for e in range(epochs):
        acc = top1 * (e + 1) / epochs
        lines.append(f"{e},{10 * e},{2 - acc:.4f},{1.5 - acc:.4f},{acc:.4f},1.0")
    (folder / "csv" / "metrics.csv").write_text("\n".join(lines) + "\n")
    confusion, predictions = _pictures()
    (folder / "confusion.png").write_bytes(confusion)
    (folder / "predictions.png").write_bytes(predictions)
    return folder
