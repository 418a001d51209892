"""Checkpoints written by ultralytics' own code, the way its trainer writes them (test-only peer).

:func:`save_like_trainer` builds an ultralytics ``DetectionModel`` with random weights and random
batch-norm statistics, wraps it in ultralytics' ``ModelEMA`` and calls ultralytics'
``BaseTrainer.save_model`` on a minimal trainer state (so ``last.pt`` has ``model: None``, the fp16 EMA
model, the optimizer state and ``train_args``), then ultralytics' ``strip_optimizer`` turns a copy
into ``best.pt`` (the EMA moved into ``model``, as at the end of a run).
"""
from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import torch

from tests.peers import import_ultralytics


def randomise(model: torch.nn.Module, seed: int = 0) -> None:
    """Random weights and batch-norm statistics, so that every tensor of the file matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for key, value in model.state_dict().items():
            if value.is_floating_point() and "dfl" not in key:
                low = 0.9 if "running_var" in key or "bn.weight" in key else -0.1
                value.copy_(torch.rand(value.shape, generator=g) * 0.2 + low)


def save_like_trainer(yaml_name: str, folder: Path, nc: int = 3, seed: int = 0,
                      names: list[str] | None = None, imgsz: int = 64,
                      model_class: str = "DetectionModel") -> tuple[Path, Path]:
    """Write ``folder/last.pt`` and ``folder/best.pt`` for ultralytics' ``yaml_name`` (e.g. yolov8n.yaml);
    class names ``names`` (default class0, class1, ...), training size ``imgsz``; ``model_class`` the
    ultralytics model class its trainer builds (``SegmentationModel`` for a -seg YAML)."""
    tasks = import_ultralytics("ultralytics.nn.tasks")
    torch.manual_seed(seed)
    model = getattr(tasks, model_class)(yaml_name, nc=nc, verbose=False)
    randomise(model, seed)
    return save_model_like_trainer(model, folder, names or [f"class{i}" for i in range(nc)], imgsz=imgsz)


def save_model_like_trainer(model: torch.nn.Module, folder: Path, names: list[str], *, imgsz: int,
                            data: str = "data.yaml", task: str | None = None) -> tuple[Path, Path]:
    """Write the ultralytics ``model`` (its weights as they are) as its trainer writes ``folder/last.pt``
    (ultralytics' ``BaseTrainer.save_model``: the fp16 EMA, the optimizer state, ``train_args`` with ``data``,
    ``imgsz`` and ``task``, which ultralytics' loader takes the task from: ``obb`` for an OBBModel; default
    its configuration's ``detect``) and ``folder/best.pt`` (a copy through ``strip_optimizer``); class names
    ``names``."""
    trainer = import_ultralytics("ultralytics.engine.trainer")
    torch_utils = import_ultralytics("ultralytics.utils.torch_utils")
    cfg = import_ultralytics("ultralytics.cfg")
    model.names = dict(enumerate(names))
    model.args = cfg.get_cfg(overrides={"data": data, "imgsz": imgsz, **({"task": task} if task else {})})
    folder.mkdir(parents=True, exist_ok=True)
    state = SimpleNamespace(
        ema=torch_utils.ModelEMA(model), model=model, epoch=0, best_fitness=0.5, fitness=0.5,
        stopper=SimpleNamespace(best_fitness=0.5, best_epoch=0), optimizer=torch.optim.AdamW(model.parameters()),
        scaler=torch.amp.GradScaler("cpu", enabled=False), args=model.args, metrics={"metrics/mAP50(B)": 0.5},
        read_results_csv=dict, wdir=folder, last=folder / "last.pt", best=folder / "trained.pt", save_period=-1)
    trainer.BaseTrainer.save_model(state)
    best = folder / "best.pt"
    shutil.move(folder / "trained.pt", best)
    torch_utils.strip_optimizer(best)
    return folder / "last.pt", best


def peer_load(path: Path) -> torch.nn.Module:
    """ultralytics' model from ``path`` (its loader runs the pickle: trusted test files only), float32, eval."""
    patches = import_ultralytics("ultralytics.utils.patches")
    ckpt = patches.torch_load(path, map_location="cpu")
    return (ckpt.get("ema") or ckpt["model"]).float().eval()
