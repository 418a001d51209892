"""DataLoader helpers: seeded workers, the loaders the data modules build, errors raised in a worker
brought back as they were, and the end of those workers when the process ends."""
from __future__ import annotations

import atexit
import random
import signal
import weakref
from typing import Any, Callable

import numpy as np
import torch

from vision_attn.data.sampler import EpochItems, EpochSampler
from vision_attn.errors import ConfigError, VisionAttnError, worker_message

__all__ = ["seed_worker", "unwrap_worker_error", "make_loader", "check_loader_args", "Loader", "end_loader_workers"]


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn``: seed Python, NumPy and the dataset's albumentations pipeline from the seed
    torch gave this worker (different per worker and per epoch, reproducible under a global seed), and
    ignore the signals that ask training to stop (a cluster sends them to every process, Ctrl-C to the
    whole terminal group): the training process writes its checkpoint, then ends its workers."""
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)
    info = torch.utils.data.get_worker_info()
    transform = getattr(getattr(info, "dataset", None), "transform", None)
    if transform is not None and hasattr(transform, "set_random_seed"):
        transform.set_random_seed(seed)


# ---------------------------------------------------------------- ending the workers
# The workers of make_loader's loaders ignore the stop signals (seed_worker), also the SIGTERM with which
# Python's exit and DataLoader's own shutdown end a worker that does not answer; a process that ends while
# such workers are alive (an error in training left a persistent loader's workers running, or a worker
# is stuck in a dataset) would then wait for them forever. Loader keeps its iterators, and
# end_loader_workers shuts them down (as Lightning does, `_shutdown_workers`), then kills any worker
# still alive. It runs when a training ends, whichever way, and at exit, before multiprocessing's own
# exit handler and torch's (atexit runs last-in first).
_ITERATORS: "weakref.WeakSet[Any]" = weakref.WeakSet()


class Loader(torch.utils.data.DataLoader):
    """A DataLoader whose worker processes :func:`end_loader_workers` can end."""

    def __iter__(self):
        iterator = super().__iter__()
        if self.num_workers > 0:
            _ITERATORS.add(iterator)  # a persistent loader returns the same iterator each epoch
        return iterator


def end_loader_workers(timeout: float = 5.0) -> None:
    """Shut down the worker processes of this process's :class:`Loader` iterators and kill those that did
    not stop (waiting at most ``timeout`` seconds for each)."""
    for iterator in list(_ITERATORS):
        workers = [w for w in getattr(iterator, "_workers", ()) if w.is_alive()]
        if workers:
            iterator._shutdown_workers()  # sends each its end, waits a moment, then SIGTERM (ignored)
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join(timeout)
    _ITERATORS.clear()


atexit.register(end_loader_workers)  # after torch's and multiprocessing's exit handlers, so it runs first


def unwrap_worker_error(exc: BaseException) -> BaseException:
    """A :class:`VisionAttnError` re-raised by the DataLoader carries the worker's traceback in its
    message; return the same type with only the original message (other exceptions unchanged)."""
    message = worker_message(exc) if isinstance(exc, VisionAttnError) else None
    return exc if message is None else type(exc)(message)


def check_loader_args(batch_size: int, eval_batch_size: int | None, num_workers: int) -> None:
    """ConfigError unless the batch sizes are positive and ``num_workers`` is 0 or more."""
    if batch_size < 1 or (eval_batch_size is not None and eval_batch_size < 1):
        raise ConfigError(f"data.batch_size={batch_size}, data.eval_batch_size={eval_batch_size}: give positive "
                          f"integers")
    if num_workers < 0:
        raise ConfigError(f"data.num_workers={num_workers}: give 0 (load in the main process) or more")


def make_loader(dataset: Any, batch_size: int, *, train: bool, num_workers: int, persistent_workers: bool,
                pin_memory: bool | None, drop_last: bool, seed: int,
                collate_fn: Callable[[list], Any] | None = None, num_replicas: int = 1,
                rank: int = 0, batches: Callable[[EpochSampler], Any] | None = None) -> torch.utils.data.DataLoader:
    """A DataLoader over this process's share (``rank`` of ``num_replicas``) of ``dataset`` in an
    :class:`~vision_attn.data.sampler.EpochSampler` order: training loaders shuffle by (``seed``, epoch),
    augment each item as a function of (``seed``, epoch, index) (:class:`~vision_attn.data.sampler.EpochItems`)
    and may drop the last batch. Workers are seeded (:func:`seed_worker`), optionally persistent; the
    loader's own generator gives them their base seed, so loading never draws from the global random
    streams. ``pin_memory`` None: when CUDA is available. ``batches``: a training loader's batch sampler
    made from the :class:`~vision_attn.data.sampler.EpochSampler` (batches of many sizes: NaFlex's token
    budget, :class:`~vision_attn.data.naflex_budget.NaFlexBatchSampler`); ``batch_size`` and
    ``drop_last`` are then unused."""
    pin = torch.cuda.is_available() if pin_memory is None else pin_memory
    generator = torch.Generator()
    generator.manual_seed(seed)
    sampler = EpochSampler(len(dataset), shuffle=train, seed=seed, num_replicas=num_replicas, rank=rank,
                           with_epoch=train)
    batching: dict[str, Any] = {"batch_size": batch_size, "sampler": sampler, "drop_last": train and drop_last}
    if train and batches is not None:
        batching = {"batch_sampler": batches(sampler)}
    return Loader(
        EpochItems(dataset, seed) if train else dataset, **batching,
        num_workers=num_workers, persistent_workers=persistent_workers and num_workers > 0, pin_memory=pin,
        worker_init_fn=seed_worker if num_workers > 0 else None, generator=generator,
        collate_fn=collate_fn, prefetch_factor=4 if num_workers > 0 else None,
    )
