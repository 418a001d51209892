"""What a checkpoint must hold, beyond Lightning's own loops, for a resumed run to continue exactly.

Lightning restores the weights, optimizer, schedulers, callbacks, loops and the data module's state
(the loader's position, :mod:`vision_attn.tasks.data_module`). :class:`ResumeState` adds, as a
callback's state:

- the random streams of every process: torch (CPU and CUDA), NumPy's global one (timm's Mixup draws
  from it) and Python's; data loader workers need none (their augmentation is a function of (seed,
  epoch, index), :class:`~vision_attn.data.sampler.EpochItems`);
- the sums behind the epoch means being logged (``train/loss_epoch``, a detector's ``train/box``, ...),
  which Lightning does not keep, so that a run resumed mid-epoch logs the same epoch values;
- the logging step (Lightning's ``_batches_that_stepped``) of a checkpoint written at the start of
  a batch (:mod:`vision_attn.tasks.checkpointer`), which Lightning's restore would count one too far.

Everything is put back at the first training batch of the resumed run, just before the point where
the checkpoint was taken. Reading Lightning's epoch accumulators and logging step uses its private
attributes (``fit_loop.epoch_loop._results``, ``_batches_that_stepped``), of pytorch-lightning 2.6.
"""
from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

__all__ = ["ResumeState", "rng_state", "set_rng_state"]

_REDUCTIONS = ("mean", "max", "min", "sum")


def rng_state() -> dict[str, Any]:
    """This process's random streams, as tensors and plain values (a ``weights_only`` checkpoint)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _epoch_results(trainer: "pl.Trainer") -> Any:
    return trainer.fit_loop.epoch_loop._results


def _reduction(meta: Any) -> str:
    return next(r for r in _REDUCTIONS if getattr(meta, f"is_{r}_reduction"))


def epoch_sums(trainer: "pl.Trainer") -> list[dict[str, Any]]:
    """The epoch accumulators of the values logged so far in the current training epoch."""
    out = []
    for key, item in _epoch_results(trainer).items():
        if not item.is_tensor or not item.meta.on_epoch or not item.update_called:
            continue
        meta = item.meta
        entry = {"key": key, "fx": meta.fx, "name": meta.name, "prog_bar": meta.prog_bar, "logger": meta.logger,
                 "on_step": meta.on_step, "reduce": _reduction(meta), "sync": bool(meta.sync.should),
                 "value": item.value.detach().cpu().clone()}
        if meta.is_mean_reduction:
            entry["count"] = item.cumulated_batch_size.detach().cpu().clone()
        out.append(entry)
    return out


def add_epoch_sums(trainer: "pl.Trainer", sums: list[dict[str, Any]]) -> None:
    """Fold the saved accumulators into the current epoch's (called after the resumed run's first batch
    logged its values: sums are added in the other order, which is the same in floating point)."""
    results = _epoch_results(trainer)
    for entry in sums:
        key = entry["key"]
        if key in results and results[key].update_called:
            item = results[key]
            device = item.value.device
            if entry["reduce"] in ("mean", "sum"):
                item.value = item.value + entry["value"].to(device)
            elif entry["reduce"] == "max":
                item.value = torch.maximum(item.value, entry["value"].to(device))
            else:
                item.value = torch.minimum(item.value, entry["value"].to(device))
            if "count" in entry:
                item.cumulated_batch_size = item.cumulated_batch_size + entry["count"].to(device)
            continue
        # logged by a hook that a resumed epoch does not run again (on_train_epoch_start): recreate it
        results.log(entry["fx"], entry["name"], entry["value"].clone(), prog_bar=entry["prog_bar"],
                    logger=entry["logger"], on_step=entry["on_step"], on_epoch=True, reduce_fx=entry["reduce"],
                    sync_dist=entry["sync"], sync_dist_fn=trainer.strategy.reduce, batch_size=1)
        item = results[key]
        item.value = entry["value"].to(item.value.device).clone()
        if "count" in entry:
            item.cumulated_batch_size = entry["count"].to(item.value.device).clone()


class ResumeState(Callback):
    """Keeps the random streams (each process's), the epoch accumulators and the logging step in the
    checkpoint, and puts them back at the first batch of a resumed run."""

    def __init__(self) -> None:
        self._trainer: pl.Trainer | None = None
        self._pending: dict[str, Any] | None = None
        self._sums: list[dict[str, Any]] | None = None

    @property
    def state_key(self) -> str:
        return "vision_attn.ResumeState"

    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        self._trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        trainer = self._trainer
        if trainer is None:
            return {}
        states = [rng_state()]
        if trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            gathered: list[Any] = [None] * trainer.world_size
            torch.distributed.all_gather_object(gathered, states[0])
            states = gathered
        progress = trainer.fit_loop.epoch_loop.batch_progress.current
        return {"rng": states, "epoch_sums": epoch_sums(trainer),
                "batches_that_stepped": int(trainer.fit_loop.epoch_loop._batches_that_stepped),
                "at_batch_start": bool(progress.ready > progress.started)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = dict(state_dict) if state_dict else None

    def on_train_batch_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", batch: Any,
                             batch_idx: int) -> None:
        state, self._pending = self._pending, None
        if state is None:
            return
        states = state["rng"]
        set_rng_state(states[trainer.global_rank] if len(states) == trainer.world_size else states[0])
        if state.get("at_batch_start"):
            trainer.fit_loop.epoch_loop._batches_that_stepped = int(state["batches_that_stepped"])
        self._sums = list(state.get("epoch_sums", []))

    def on_train_batch_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        sums, self._sums = self._sums, None
        if sums:
            add_epoch_sums(trainer, sums)
