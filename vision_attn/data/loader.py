"""DataLoader helpers: seeded workers, and errors raised in a worker brought back as they were."""
from __future__ import annotations

import random
import re

import numpy as np
import torch

from vision_attn.errors import VisionAttnError

__all__ = ["seed_worker", "unwrap_worker_error"]

_WRAPPED = re.compile(r"^Caught (\w+) in DataLoader worker process \d+\.")


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn``: seed Python, NumPy and the dataset's albumentations pipeline from the seed
    torch gave this worker (different per worker and per epoch, reproducible under a global seed)."""
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)
    info = torch.utils.data.get_worker_info()
    transform = getattr(getattr(info, "dataset", None), "transform", None)
    if transform is not None and hasattr(transform, "set_random_seed"):
        transform.set_random_seed(seed)


def unwrap_worker_error(exc: BaseException) -> BaseException:
    """A :class:`VisionAttnError` re-raised by the DataLoader carries the worker's traceback in its
    message; return the same type with only the original message (other exceptions unchanged)."""
    if not isinstance(exc, VisionAttnError):
        return exc
    text = str(exc)
    if not _WRAPPED.match(text):
        return exc
    name = type(exc).__name__
    marker = f"{type(exc).__module__}.{name}: "
    last = text.rfind(marker)
    message = text[last + len(marker):].strip() if last >= 0 else text.splitlines()[-1]
    return type(exc)(message)
