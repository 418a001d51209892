"""The toy task's :class:`~vision_attn.tasks.task.Task` record: how the runner builds and reports a run,
and what ``eval``, ``predict``, ``export`` and ``ablate`` ask of it."""
from __future__ import annotations

from typing import Any

from tests.tasks.toy_task import run as toy_run
from tests.tasks.toy_task.data import ToyDataModule
from tests.tasks.toy_task.module import ToyModule, toy_network
from vision_attn.tasks.config import to_dict
from vision_attn.tasks.runner import metric_value
from vision_attn.tasks.task import Echo, Metric, Task


def _build(cfg, say: Echo) -> tuple[Any, Any]:
    datamodule = ToyDataModule(**to_dict(cfg)["data"])
    say(f"data: {len(datamodule.train_set)} toy images")
    return ToyModule(**to_dict(cfg)["model"]), datamodule


def _report(run, cm, module, datamodule, cfg, *, flops, best, common) -> dict[str, Any]:
    return {"name": cfg.name, "model": "toy", "val_score": metric_value(cm, "val/score"), "best_val_score": best,
            **common, "params": flops.params, "gmacs": round(flops.gmacs, 6)}


TOY = Task(
    name="toy", title="Regress the mean colour of generated images (a task defined in tests/).",
    module=ToyModule, datamodule=ToyDataModule, filled=frozenset(),
    primary=Metric("val_score", "val/score", "1 - MAE"),
    build=_build, shadow=lambda module, cfg: (toy_network(module.hparams.width), "toy"),
    panels=(("loss.png", ("train/loss_epoch", "val/loss"), "loss"),), report=_report,
    summary=lambda m: f"val score (1 - MAE): {m['val_score']:.3f}", load=toy_run.load_toy_run,
    evaluate=toy_run.evaluate, eval_listing=toy_run.eval_listing, predict=toy_run.predict,
    prediction=("mean colour (r, g, b)", lambda r: ", ".join(f"{v:.2f}" for v in r["colour"])),
    export_kind="classifier", headline=(("val_score", "1 - MAE"),))
