"""Lightning checkpoints written atomically beside their target, the previous one kept.

Lightning's own writer stages a local file in the system's temporary folder and moves it into place,
which is a copy (not a rename) when that folder lies on another file system: a kill during the copy
leaves half a ``last.ckpt``. Here the temporary file lies in the checkpoint's own folder and
``os.replace`` puts it in place in one step. For the paths in ``keep_previous`` the file being
replaced stays as the named previous one (a hard link made before the new file is renamed over it),
so a checkpoint damaged after it was written (a full disk, a broken copy) still has one to fall back
on. A checkpoint the runner has already read and checked (``preloaded``) is not read a second time.
Remote paths (``s3://...``) keep Lightning's writer.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from vision_attn.io.atomic import save_torch

__all__ = ["AtomicCheckpointIO"]


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to a temporary file beside ``path``, then ``os.replace``.

    Args:
        keep_previous: target path -> where the file it replaces is kept.
        preloaded: (path, checkpoint) already read: what loading ``path`` returns, once.
    """

    def __init__(self, keep_previous: Mapping[os.PathLike, os.PathLike] | None = None,
                 preloaded: tuple[os.PathLike, dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.keep_previous = {Path(k).absolute(): Path(v) for k, v in (keep_previous or {}).items()}
        self._preloaded = (Path(preloaded[0]).absolute(), preloaded[1]) if preloaded is not None else None

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike,
                        storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        previous = self.keep_previous.get(Path(path).absolute())
        if previous is not None and Path(path).is_file():
            _keep(Path(path), previous)
        save_torch(checkpoint, path, mkdir=True)

    def load_checkpoint(self, path: Any, map_location: Callable | Any = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        if self._preloaded is not None and "://" not in str(path) and Path(path).absolute() == self._preloaded[0]:
            checkpoint, self._preloaded = self._preloaded[1], None
            return checkpoint
        return super().load_checkpoint(path, map_location=map_location or (lambda storage, loc: storage),
                                       weights_only=weights_only)


def _keep(path: Path, previous: Path) -> None:
    """``previous`` becomes what ``path`` is now (a hard link; a copy where links are not supported)."""
    tmp = previous.with_name(f".{previous.name}.keep")
    tmp.unlink(missing_ok=True)
    try:
        os.link(path, tmp)
    except OSError:
        shutil.copyfile(path, tmp)
    os.replace(tmp, previous)
