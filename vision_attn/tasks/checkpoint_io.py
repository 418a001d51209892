"""Lightning checkpoints written atomically beside their target.

Lightning's own writer stages a local file in the system's temporary folder and moves it into place,
which is a copy (not a rename) when that folder lies on another file system: a kill during the copy
leaves half a ``last.ckpt``. Here the temporary file lies in the checkpoint's own folder and
``os.replace`` puts it in place in one step. Remote paths (``s3://...``) keep Lightning's writer.
"""
from __future__ import annotations

import os
from typing import Any

from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from vision_attn.io.atomic import save_torch

__all__ = ["AtomicCheckpointIO"]


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to a temporary file beside ``path``, then ``os.replace``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike,
                        storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        save_torch(checkpoint, path, mkdir=True)
