"""Loading a trained toy run, evaluating it on ``toy:N`` and predicting the mean colour of image files."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from tests.tasks.toy_task.data import open_toy
from tests.tasks.toy_task.module import toy_network
from vision_attn.data import image_paths, load_image
from vision_attn.tasks import load_run
from vision_attn.tasks.runs import Run, Runtime, load_run_weights
from vision_attn.tasks.task import Listing, Options

CHANNELS = ("r", "g", "b")


def load_toy_run(ckpt: dict[str, Any], path: Path, *, device: str | torch.device = "cpu",
                 weights: bool = True) -> Run:
    """The toy run of the checkpoint ``ckpt``: its network rebuilt from the recorded width."""
    hp, data_hp = dict(ckpt["hyper_parameters"]), dict(ckpt.get("datamodule_hyper_parameters") or {})
    with torch.device(device):
        model = toy_network(hp["width"])
    if weights:
        load_run_weights(model, ckpt["state_dict"], f"{path}: the weights do not fit the toy network")
    size = int(data_hp.get("img_size", 16))
    return Run("toy", model.eval(), list(CHANNELS), (size, size), f"toy width {hp['width']} ({path.parent.name})",
               path, hp, data_hp, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))


@torch.no_grad()
def evaluate(checkpoint: str | os.PathLike, data: str, options: Options, runtime: Runtime | None) -> dict[str, Any]:
    """The mean absolute error per channel of a toy run on ``data`` (``toy:N``, seed 7)."""
    run = load_run(checkpoint, task="toy")
    network = run.model if runtime is None else runtime(run.model, run.img_size, None)
    x, y = open_toy(data, run.img_size[0], seed=7).tensors
    error = (network(x).float() - y).abs().mean(0)
    return {"checkpoint": str(checkpoint), "data": data, "images": len(x), "mae": float(error.mean()),
            "per_channel": {c: float(e) for c, e in zip(CHANNELS, error)}}


def eval_listing(report: dict[str, Any]) -> Listing:
    rows = [(c, f"{e:.4f}") for c, e in report["per_channel"].items()]
    return Listing(f"{report['checkpoint']} on {report['data']} ({report['images']} images)", ("channel", "MAE"),
                   rows, f"MAE {report['mae']:.4f}")


@torch.no_grad()
def predict(checkpoint: str | os.PathLike, images: Sequence[str], options: Options,
            runtime: Runtime | None) -> list[dict[str, Any]]:
    """``[{"image", "colour": [r, g, b]}]``: the predicted mean colour of each image file, resized to the run's
    size."""
    run = load_run(checkpoint, task="toy")
    network = run.model if runtime is None else runtime(run.model, run.img_size, None)
    out = []
    for path in image_paths(images):
        x = torch.from_numpy(np.array(load_image(path))).permute(2, 0, 1)[None].float() / 255
        x = torch.nn.functional.interpolate(x, size=run.img_size, mode="area")
        out.append({"image": str(path), "colour": [round(float(v), 4) for v in network(x)[0]]})
    return out
